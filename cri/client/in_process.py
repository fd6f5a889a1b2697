"""The call path for a kubelet in the runtime's own process (`nodeagent up`, `agent` with its runtime):
unary CRI calls handed to the runtime's servicers directly, without gRPC framing or a socket.

The server's side (`cri.server.in_process`) registers itself under the unix socket it serves; a
`RuntimeClient` made for that socket, in the same process, finds it here and calls it instead of the
socket, as `nodeagent.client.in_process` does for the apiserver. The servicer answers through the same
`@rpc` boundary (logging, error codes) as over gRPC, and a failure comes back as a `grpc.aio.AioRpcError`
with the code and details gRPC would carry, so `is_not_found` and every `.code()` check read it alike.
Streaming verbs (GetContainerEvents) stay on the socket; so does every client in another process
(crictl, the sync client, `nodeagent agent` against containerd)."""

from __future__ import annotations

import os.path
from typing import Any, Protocol

import grpc

RUNTIME = "runtime.v1.RuntimeService"
IMAGES = "runtime.v1.ImageService"


class StatusError(grpc.aio.AioRpcError):
    """An RPC's failure as a gRPC client sees it: the status code and details, no metadata."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details, None)


class Server(Protocol):
    """A CRI runtime in this process, as its in-process entry offers it to clients."""

    async def call(self, service: str, method: str, request: Any, deadline: float | None) -> Any:
        """`method`'s answer to a copy of `request`; StatusError on failure (DEADLINE_EXCEEDED past
        `deadline` seconds, the handler then cancelled as gRPC cancels it; UNAVAILABLE once stopped)."""
        ...


_SERVERS: dict[str, Server] = {}


def socket_path(endpoint: str) -> str:
    """`unix:///run/x.sock`, `unix:/x` or a bare path → the socket's path, normalised (the registry's
    key: the server registers the path it binds, the kubelet looks up the endpoint it was given)."""
    for prefix in ("unix://", "unix:"):
        if endpoint.startswith(prefix):
            endpoint = endpoint[len(prefix):]
            break
    return os.path.normpath(endpoint)


def register(path: str, server: Server) -> None:
    """`server` answers for the socket at `path` in this process (until `unregister`)."""
    _SERVERS[path] = server


def unregister(path: str, server: Server) -> None:
    if _SERVERS.get(path) is server:
        del _SERVERS[path]


def lookup(path: str) -> Server | None:
    """The runtime in this process serving the socket at `path`, if one does."""
    return _SERVERS.get(path)


class LocalStub:
    """A generated stub's face (`stub.Verb(request, timeout=...)`) whose unary verbs go to the runtime
    registered for `path` while one is, else (and for streaming verbs) to the gRPC stub `remote`."""

    def __init__(self, service: str, path: str, remote: Any) -> None:
        self._service, self._path, self._remote = service, path, remote

    def __getattr__(self, name: str) -> Any:
        remote = getattr(self._remote, name)
        if not isinstance(remote, grpc.aio.UnaryUnaryMultiCallable):
            return remote
        service, path = self._service, self._path

        async def call(request: Any, **options: Any) -> Any:  # options: the stub's (timeout=...)
            server = lookup(path)
            if server is None:  # the runtime stopped (or moved out): the socket, as any client
                return await remote(request, **options)
            return await server.call(service, name, request, options.get("timeout"))

        setattr(self, name, call)  # looked up once per verb
        return call

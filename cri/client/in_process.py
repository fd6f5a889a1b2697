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

from typing import Any, Protocol

import grpc

from kernel.in_process import Registry

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


# by the socket each serves; `cri.server.app.stop_local` leaves it
servers: Registry[Server] = Registry()


class LocalStub:
    """A generated stub's face (`stub.Verb(request, timeout=...)`) whose unary verbs go to the runtime
    registered for `endpoint` while one is, else (and for streaming verbs) to the gRPC stub `remote`."""

    def __init__(self, service: str, endpoint: str, remote: Any) -> None:
        self._service, self._endpoint, self._remote = service, endpoint, remote

    def __getattr__(self, name: str) -> Any:
        remote = getattr(self._remote, name)
        if not isinstance(remote, grpc.aio.UnaryUnaryMultiCallable):
            return remote
        service, endpoint = self._service, self._endpoint

        async def call(request: Any, **options: Any) -> Any:  # options: the stub's (timeout=...)
            server = servers.lookup(endpoint)
            if server is None:  # the runtime stopped (or moved out): the socket, as any client
                return await remote(request, **options)
            return await server.call(service, name, request, options.get("timeout"))

        setattr(self, name, call)  # looked up once per verb
        return call

"""The call path for components that live in the apiserver's own process: requests handed to its handler
chain directly, without HTTP framing, TLS or a socket on either end.

The server's side (`nodeagent.apiserver.in_process`) registers itself in `servers` under the local socket it
serves (`local_socket`); a client made from a kubeconfig that names that socket, in the same process, finds it
there and calls it instead of connecting. Each call still carries the component's credential: the server
authenticates it and applies RBAC, admission, max-in-flight and metrics as for an HTTP request, and answers
with the same status, headers and body (the client reads them as it reads an HTTP answer). Anything the server
streams other than a watch (logs, exec, port-forward, proxy) stays on HTTP."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import NamedTuple, Protocol

from kernel.in_process import Registry

# subresources the server streams to and from a kubelet: only HTTP carries them
STREAMED = frozenset({"log", "exec", "attach", "portforward", "proxy"})


class Answer(NamedTuple):
    """What the server answered: its status, the headers a client reads, the body and its media type."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    content_type: str


class Server(Protocol):
    """An apiserver in this process, as its in-process entry offers it to clients."""

    async def call(self, method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str],
                   body: bytes | None, deadline: float) -> Answer:
        """One request; TimeoutError when no answer comes within `deadline` seconds, ConnectionError once
        the server has stopped."""
        ...

    async def watch(self, path: str, query: Mapping[str, str],
                    headers: Mapping[str, str]) -> tuple[Answer, AsyncGenerator[bytes, None] | None]:
        """A watch: the answer, and when it is 200 the stream's chunks (newline-ended JSON events), which
        end when the watch does (timeout, the server stopping); closing the iterator ends the watch."""
        ...


# by the local socket each serves; `Server.stop` leaves it (nodeagent.apiserver.server)
servers: Registry[Server] = Registry()


def streamed(path: str) -> bool:
    """Whether `path` names a subresource the server streams (carried over HTTP only)."""
    if not any(name in path for name in STREAMED):  # nearly every path: no split
        return False
    parts = path.split("/")
    return any(p in ("pods", "nodes", "services") and len(parts) > i + 2 and parts[i + 2] in STREAMED
               for i, p in enumerate(parts))

"""Servers of this process found by the Unix socket they serve, so that a client made for that socket in
the same process calls the server directly instead of connecting: the apiserver's in-process entry
(`nodeagent.client.in_process`) and the CRI runtime's (`cri.client.in_process`) each keep a `Registry`.

It lives in the kernel layer because that is the one package both `cri` and `nodeagent` may import; it
is a plain dict, no kernel call. One registry per kind of server, so a CRI client never finds an
apiserver. The key is the socket's path normalised in one place (`key`): a server registers the path it
binds, a client looks up the endpoint it was given (`unix:///run/x.sock`, `unix:/run/x.sock`,
`/run//x.sock`), and both must meet."""

from __future__ import annotations

import functools
import os.path
from typing import Generic, TypeVar

S = TypeVar("S")


@functools.lru_cache(maxsize=64)  # a process names few sockets; a lookup is on every in-process call
def key(endpoint: str) -> str:
    """`unix:///run/x.sock`, `unix:/x` or a bare path → the socket's path, normalised (the registries'
    key). A relative path stays relative, as a socket client resolves it against its working directory."""
    for prefix in ("unix://", "unix:"):
        if endpoint.startswith(prefix):
            endpoint = endpoint[len(prefix):]
            break
    return os.path.normpath(endpoint)


class Registry(Generic[S]):
    """The servers of one kind in this process, by the socket each serves."""

    def __init__(self) -> None:
        self._servers: dict[str, S] = {}

    def register(self, endpoint: str, server: S) -> None:
        """`server` answers for the socket at `endpoint` in this process (until `unregister`)."""
        self._servers[key(endpoint)] = server

    def unregister(self, endpoint: str, server: S) -> None:
        """`server` has stopped: its entry goes, unless another server has registered there since."""
        k = key(endpoint)
        if self._servers.get(k) is server:
            del self._servers[k]

    def lookup(self, endpoint: str | None) -> S | None:
        """The server in this process serving the socket at `endpoint`, if one does (None for None)."""
        return self._servers.get(key(endpoint)) if endpoint else None

"""The request the handler chain serves, whichever entry it came through: aiohttp's `BaseRequest` (HTTPS
and the local socket) or `LocalRequest`, made by the in-process entry (`in_process.py`) for a component in
the server's own process. Both carry the same things (method, path, query, headers with the credential,
body), so authentication, authorization, admission, max-in-flight and metrics see one kind of request."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol
from urllib.parse import urlencode

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy, MultiDict, MultiDictProxy

from nodeagent.apiserver import errors
from nodeagent.apiserver.watch_sink import ChannelSink, HttpSink, WatchSink


class Body(Protocol):
    async def read(self, n: int = -1) -> bytes: ...


class ApiRequest(Protocol):
    """What the handler chain reads of a request (aiohttp's `BaseRequest` is one as it is)."""

    @property
    def method(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def path_qs(self) -> str: ...
    @property
    def query(self) -> Mapping[str, str]: ...
    @property
    def headers(self) -> CIMultiDictProxy[str]: ...
    @property
    def content_length(self) -> int | None: ...
    @property
    def can_read_body(self) -> bool: ...
    @property
    def content(self) -> Body: ...
    @property
    def transport(self) -> asyncio.Transport | None: ...


class _Bytes:
    """A body already in memory, read as aiohttp's stream reader reads one (`read(n)` until b"")."""

    def __init__(self, data: bytes) -> None:
        self._data, self._at = data, 0

    async def read(self, n: int = -1) -> bytes:
        end = len(self._data) if n < 0 else self._at + n
        out = self._data[self._at:end]
        self._at += len(out)
        return out


class LocalRequest:
    """A request from a component in this process: no transport (so no client certificate; the credential
    is the bearer token its kubeconfig gives it, in `headers`); a watch writes to `sink`."""

    transport: asyncio.Transport | None = None

    def __init__(self, method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str],
                 body: bytes | None, sink: ChannelSink | None = None) -> None:
        self.method, self.path = method, path
        self.query = MultiDictProxy(MultiDict(query))
        self.headers = CIMultiDictProxy(CIMultiDict(headers))
        self._body = body or b""
        self.content = _Bytes(self._body)
        self.content_length = len(self._body) if body is not None else None
        self.can_read_body = bool(self._body)
        self.sink = sink

    @property
    def path_qs(self) -> str:
        if not self.query:
            return self.path
        return f"{self.path}?{urlencode(list(self.query.items()))}"


async def open_watch(request: ApiRequest) -> WatchSink:
    """Start a watch's stream on whichever entry `request` came through (its 200 goes out now)."""
    if isinstance(request, LocalRequest) and request.sink is not None:
        request.sink.open()
        return request.sink
    if isinstance(request, web.BaseRequest):
        return await HttpSink.open(request)
    raise errors.bad_request("this entry carries no watch stream")


def over_http(request: ApiRequest) -> web.BaseRequest:
    """`request` as aiohttp's, for what only HTTP carries (the kubelet's streams: logs, exec, attach,
    port-forward, proxy); 400 for a request that came another way (the in-process client sends those over
    HTTP)."""
    if not isinstance(request, web.BaseRequest):
        raise errors.bad_request("streamed subresources are served over HTTP only")
    return request

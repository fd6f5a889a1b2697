"""Where a watch's bytes go: an HTTP chunked stream (HTTPS and the local socket), or a channel a client in
this process reads (the in-process entry). The watch handler writes through one interface either way, so a
watch means the same on both: the same events, bookmarks, timeouts, buffer bound and end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from aiohttp import web

WATCH_BUFFER = 16 * 1024 * 1024  # a watcher whose unsent events exceed this is ended (it re-watches)
HIGH_WATER = 64 * 1024  # a handler's own write waits while this much is unread (aiohttp's drain mark)
STREAM_HEADERS = {"Content-Type": "application/json", "Cache-Control": "no-cache, private"}


class WatchSink(Protocol):
    @property
    def response(self) -> web.StreamResponse:
        """What the handler returns (its status is what metrics count)."""
        ...

    def accepts(self) -> bool:
        """Whether the reader is there and not too far behind (else the watcher is ended)."""
        ...

    def send_now(self, data: bytes) -> None:
        """Write at once, from a loop callback (the coalesced events the cache queued)."""
        ...

    async def send(self, data: bytes) -> None:
        """The handler's own write; waits while the reader is behind. ConnectionError once it is gone."""
        ...

    async def end(self) -> None:
        """The watch is over: the reader sees its stream end."""
        ...


class HttpSink:
    """A chunked HTTP response, written directly on the transport for the coalesced events."""

    def __init__(self, response: web.StreamResponse, transport: asyncio.Transport | None) -> None:
        self.response = response
        self._transport = transport

    @classmethod
    async def open(cls, request: web.BaseRequest) -> HttpSink:
        resp = web.StreamResponse(headers=STREAM_HEADERS)
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        return cls(resp, request.transport)

    def accepts(self) -> bool:
        t = self._transport
        return t is not None and not t.is_closing() and t.get_write_buffer_size() <= WATCH_BUFFER

    def send_now(self, data: bytes) -> None:
        t = self._transport
        if t is not None and not t.is_closing():
            t.write(b"%x\r\n%b\r\n" % (len(data), data))

    async def send(self, data: bytes) -> None:
        await self.response.write(data)

    async def end(self) -> None:
        await self.response.write_eof()


class ChannelSink:
    """Chunks handed to a reader in this process, with the HTTP stream's bounds: the reader takes all that
    is queued at once; the handler's own writes wait past HIGH_WATER; past WATCH_BUFFER the watcher ends."""

    def __init__(self) -> None:
        self.response = web.StreamResponse(headers=STREAM_HEADERS)
        self.opened = asyncio.get_running_loop().create_future()  # set once the stream starts (200)
        self._chunks: list[bytes] = []
        self._size = 0
        self._ready = asyncio.Event()
        self._drained = asyncio.Event()
        self._ended = False
        self.closed = False  # the reader went away

    def open(self) -> None:
        if not self.opened.done():
            self.opened.set_result(None)

    def accepts(self) -> bool:
        return not self.closed and self._size <= WATCH_BUFFER

    def send_now(self, data: bytes) -> None:
        if data and not self.closed:
            self._chunks.append(data)
            self._size += len(data)
            self._ready.set()

    async def send(self, data: bytes) -> None:
        if self.closed:
            raise ConnectionResetError("the in-process watcher went away")
        self.send_now(data)
        while self._size > HIGH_WATER and not self.closed:
            self._drained.clear()
            await self._drained.wait()

    async def end(self) -> None:
        self.finish()

    def finish(self) -> None:
        """The stream is over (its handler returned, or was ended with the server): the reader stops."""
        self._ended = True
        self._ready.set()

    def close(self) -> None:
        """The reader is gone: writes stop and a waiting handler is released."""
        self.closed = True
        self._drained.set()

    async def chunks(self) -> AsyncIterator[bytes]:
        """Everything queued since the last read, one chunk at a time, until the watch ends."""
        while True:
            if self._chunks:
                data = b"".join(self._chunks)
                self._chunks.clear()
                self._size = 0
                self._drained.set()
                yield data
                continue
            if self._ended or self.closed:
                return
            self._ready.clear()
            await self._ready.wait()

"""The apiserver's second entry, for the components in its own process (the scheduler's binds and events,
the informers' lists and watches, the controllers): their requests go into the same handler chain as an
HTTP request's, without HTTP framing on either end. kube-apiserver's loopback client is the model: a
privileged path that still carries a credential, so the server still sees who calls (authentication,
RBAC, admission, max-in-flight, metrics, field validation and warnings as over HTTP)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Coroutine, Mapping
from typing import Any

from aiohttp import web

from nodeagent.apiserver.incoming import ApiRequest, LocalRequest
from nodeagent.apiserver.watch_sink import ChannelSink
from nodeagent.client.in_process import Answer

Handler = Callable[[ApiRequest], Coroutine[Any, Any, web.StreamResponse]]
SWEEP_S = 1.0  # how often the callers past their deadline are failed (deadlines are whole seconds)


def answer(resp: web.StreamResponse) -> Answer:
    """A finished response as the client reads it: status, headers, body (a Response's body is bytes)."""
    body = resp.body if isinstance(resp, web.Response) else None
    if not isinstance(body, bytes):
        body = b""
    return Answer(resp.status, resp.headers, body, resp.content_type)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():  # not already failed by its deadline, nor cancelled with its caller
        waiter.set_result(None)


class LocalEntry:
    """Requests handed to `handle` (`Handlers.handle`) as `LocalRequest`s, each in a task of its own as
    an HTTP request is served (its context: who asks, the admission scope), which runs to its end even
    when the caller stops waiting, as the HTTP server runs a handler whose client went away."""

    def __init__(self, handle: Handler) -> None:
        self._handle = handle
        self._tasks: set[asyncio.Task[web.StreamResponse]] = set()
        self._stopped = False
        self._deadlines: list[tuple[float, asyncio.Future[None]]] = []
        self._sweeper: asyncio.TimerHandle | None = None

    def _start(self, req: LocalRequest) -> asyncio.Task[web.StreamResponse]:
        if self._stopped:
            raise ConnectionRefusedError("the apiserver has stopped")
        task = asyncio.get_running_loop().create_task(self._handle(req))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def call(self, method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str],
                   body: bytes | None, deadline: float) -> Answer:
        """The answer; TimeoutError past `deadline` (within SWEEP_S: one coarse timer for every caller, as
        `WatchCache.wait_for` does, since a timer per call filled the loop's heap with cancelled ones)."""
        task = self._start(LocalRequest(method, path, query, headers, body))
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        task.add_done_callback(lambda _: _resolve(waiter))
        self._deadlines.append((loop.time() + deadline, waiter))
        if self._sweeper is None:
            self._sweeper = loop.call_later(SWEEP_S, self._sweep)
        await waiter  # the caller's cancel or deadline leaves the handler running, as over HTTP
        if task.cancelled():
            raise ConnectionResetError("the apiserver stopped")
        return answer(task.result())

    def _sweep(self) -> None:
        self._sweeper = None
        now = asyncio.get_running_loop().time()
        kept = []
        for at, waiter in self._deadlines:
            if waiter.done():
                continue
            if at <= now:
                waiter.set_exception(TimeoutError())
            else:
                kept.append((at, waiter))
        self._deadlines = kept
        if kept:
            self._sweeper = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)

    async def watch(self, path: str, query: Mapping[str, str],
                    headers: Mapping[str, str]) -> tuple[Answer, AsyncGenerator[bytes, None] | None]:
        sink = ChannelSink()
        task = self._start(LocalRequest("GET", path, query, headers, None, sink))
        task.add_done_callback(lambda _: sink.finish())  # ended with the server too: the reader stops
        try:
            await asyncio.wait((task, sink.opened), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # the caller was cancelled: nobody will read this stream
            sink.close()
            task.cancel()
            raise
        if not sink.opened.done():  # refused before the stream started (401, 403, 410, 429...)
            return answer(task.result()), None
        return Answer(200, sink.response.headers, b"", "application/json"), self._stream(sink, task)

    @staticmethod
    async def _stream(sink: ChannelSink,
                      task: asyncio.Task[web.StreamResponse]) -> AsyncGenerator[bytes, None]:
        try:
            async for chunk in sink.chunks():
                yield chunk
        finally:  # the reader is done (or the watch is): the handler ends as on a closed connection
            sink.close()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def stop(self) -> None:
        """Refuse new calls and end the running ones (their watches end; a client re-watches and is
        refused), as stopping the HTTP server closes its connections."""
        self._stopped = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t

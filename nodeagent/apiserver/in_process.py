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


def answer(resp: web.StreamResponse) -> Answer:
    """A finished response as the client reads it: status, headers, body (a Response's body is bytes)."""
    body = resp.body if isinstance(resp, web.Response) else None
    if not isinstance(body, bytes):
        body = b""
    return Answer(resp.status, resp.headers, body, resp.content_type)


class LocalEntry:
    """Requests handed to `handle` (`Handlers.handle`) as `LocalRequest`s, each in a task of its own as
    an HTTP request is served (its context: who asks, the admission scope), which runs to its end even
    when the caller stops waiting, as the HTTP server runs a handler whose client went away."""

    def __init__(self, handle: Handler) -> None:
        self._handle = handle
        self._tasks: set[asyncio.Task[web.StreamResponse]] = set()
        self._stopped = False

    def _start(self, req: LocalRequest) -> asyncio.Task[web.StreamResponse]:
        if self._stopped:
            raise ConnectionRefusedError("the apiserver has stopped")
        task = asyncio.get_running_loop().create_task(self._handle(req))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def call(self, method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str],
                   body: bytes | None, deadline: float) -> Answer:
        task = self._start(LocalRequest(method, path, query, headers, body))
        try:
            async with asyncio.timeout(deadline):
                return answer(await asyncio.shield(task))
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and current is not None and not current.cancelling():
                raise ConnectionResetError("the apiserver stopped") from None  # not the caller's cancel
            raise

    async def watch(self, path: str, query: Mapping[str, str],
                    headers: Mapping[str, str]) -> tuple[Answer, AsyncGenerator[bytes, None] | None]:
        sink = ChannelSink()
        task = self._start(LocalRequest("GET", path, query, headers, None, sink))
        task.add_done_callback(lambda _: sink.finish())  # ended with the server too: the reader stops
        await asyncio.wait((task, sink.opened), return_when=asyncio.FIRST_COMPLETED)
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
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t

"""In-process watch fan-out shared by every backend: one bounded queue per watcher.

Like the Kubernetes apiserver's watch cache, a backend publishes each committed
event once and every matching watcher gets it from its own queue. A watcher that
falls `maxsize` events behind is ended with Gone (it must relist) instead of
letting its queue grow without bound or slowing the writers down. Events are
shared between watchers: consumers must treat them as read-only.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterable

from nodeagent.store.base import Event, Gone

DEFAULT_QUEUE = 10_000


class Watcher:
    """One subscriber: a prefix, the revision it has already seen, and its queue."""

    __slots__ = ("_ended", "_queue", "_waiter", "maxsize", "prefix", "since")

    def __init__(self, prefix: str, since: int, maxsize: int) -> None:
        self.prefix = prefix
        self.since = since  # events at or below this revision are not delivered
        self.maxsize = maxsize
        self._queue: collections.deque[Event] = collections.deque()
        self._waiter: asyncio.Future | None = None
        self._ended: BaseException | bool = False  # True: closed cleanly; an exception: raise it

    def push(self, ev: Event) -> None:
        if self._ended is not False or ev.revision <= self.since:
            return
        if len(self._queue) >= self.maxsize:
            self._queue.clear()
            self.end(Gone(self.prefix, self.since, ev.revision))
            return
        self.since = ev.revision
        self._queue.append(ev)
        self._wake()

    def end(self, error: BaseException | None = None) -> None:
        """Stop the watcher: after its queued events, `next` returns None (or raises `error` at once)."""
        if self._ended is False:
            self._ended = error if error is not None else True
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def next(self) -> Event | None:
        """The next event, None when ended cleanly; raises Gone if the watcher fell behind."""
        while True:
            if isinstance(self._ended, BaseException):
                raise self._ended
            if self._queue:
                return self._queue.popleft()
            if self._ended:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None


class FanOut:
    """Routes committed events to watchers by key prefix."""

    def __init__(self, maxsize: int = DEFAULT_QUEUE) -> None:
        self.maxsize = maxsize
        self._by_prefix: dict[str, set[Watcher]] = {}

    def __len__(self) -> int:
        return sum(len(ws) for ws in self._by_prefix.values())

    def subscribe(self, prefix: str, since: int, maxsize: int | None = None) -> Watcher:
        w = Watcher(prefix, since, maxsize or self.maxsize)
        self._by_prefix.setdefault(prefix, set()).add(w)
        return w

    def unsubscribe(self, w: Watcher) -> None:
        ws = self._by_prefix.get(w.prefix)
        if ws is not None:
            ws.discard(w)
            if not ws:
                del self._by_prefix[w.prefix]

    def publish(self, ev: Event) -> None:
        for prefix, ws in self._by_prefix.items():
            if ev.key.startswith(prefix):
                for w in ws:
                    w.push(ev)

    def publish_many(self, events: Iterable[Event]) -> None:
        for ev in events:
            self.publish(ev)

    def close(self, error: BaseException | None = None) -> None:
        """End every watcher (cleanly, or with `error`)."""
        for ws in self._by_prefix.values():
            for w in ws:
                w.end(error)

"""The watch cache: one store watch feeding an in-memory index, an event window, and every API watcher.

Like kube-apiserver's cacher: GET and LIST are served from memory after waiting until the cache has
caught up with the store's current revision (so a client reads its own writes), objects are encoded
once (bytes kept beside the dict), and each change is encoded once for all plain-JSON watchers.
Watches may start from any revision inside the event window; older ones get 410 Expired.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Literal

from nodeagent.api.resources import CRD_PREFIX, split_key, split_prefix, sync_crd
from nodeagent.apiserver import codec
from nodeagent.store import base as store_base

log = logging.getLogger("nodeagent.apiserver.cache")
ROOT = "/registry/"
SWEEP_S = 0.5  # how often wait_fresh's deadlines are checked (a waiter times out up to this much late)


class Entry:
    __slots__ = ("obj", "_raw")

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self._raw: bytes | None = None

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = codec.dumps(self.obj)
        return self._raw


class CachedEvent:
    __slots__ = ("type", "key", "obj", "prev", "revision", "_line")

    def __init__(self, ev: store_base.Event) -> None:
        self.type, self.key, self.obj = ev.type, ev.key, ev.object
        self.prev, self.revision = ev.prev, ev.revision
        self._line: bytes | None = None

    @property
    def line(self) -> bytes:
        """`{"type":..,"object":..}\\n`, encoded once for every plain-JSON watcher."""
        if self._line is None:
            self._line = codec.dumps({"type": self.type, "object": self.obj}) + b"\n"
        return self._line


# What a subscriber's queue holds (see WatchCache.subscribe); None ends the stream.
QueueItem = (tuple[Literal["initial"], Entry] | tuple[Literal["synced"], int]
             | tuple[Literal["gone"], tuple[int, int]] | CachedEvent | None)


class Subscriber:
    __slots__ = ("direct", "prefix", "queue", "since")

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.since = 0
        self.queue: asyncio.Queue[QueueItem] = asyncio.Queue()
        # Set by a plain-JSON watcher once caught up: events are written to its connection right here,
        # with no task switch per watcher; returns False when the connection is gone or backed up.
        self.direct: Callable[[bytes], bool] | None = None


def _split(key: str) -> tuple[str, str, str]:
    """A store key -> (its resource's prefix, namespace or '', name)."""
    return split_key(key)


def _same_version(a: dict[str, Any], b: dict[str, Any]) -> bool:
    rv = (a.get("metadata") or {}).get("resourceVersion")
    return rv is not None and rv == (b.get("metadata") or {}).get("resourceVersion")


class WatchCache:
    def __init__(self, store: store_base.Store, window: int = 20000, max_backlog: int = 10000) -> None:
        self.store = store
        self.max_backlog = max_backlog
        self.rev = 0
        self.oldest = 0  # watches may start from any revision >= oldest
        self._index: dict[str, dict[str, dict[str, Entry]]] = {}  # res prefix -> ns -> name -> Entry
        self._events: collections.deque[CachedEvent] = collections.deque(maxlen=window)
        self._subs: set[Subscriber] = set()
        # wait_fresh's callers: (revision, deadline, future), in the order of their revisions
        self._waiters: collections.deque[tuple[int, float, asyncio.Future[None]]] = collections.deque()
        self._sweeper: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None
        self.ready = asyncio.Event()

    async def start(self) -> None:
        await self._fill()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="watch-cache")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        for s in list(self._subs):
            s.queue.put_nowait(None)
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    async def _fill(self) -> None:
        items, rev = await self.store.list(ROOT)
        self._index = {}
        for o in items:  # custom resources' definitions first: their objects' keys depend on them
            if o.get("kind") == "CustomResourceDefinition":
                sync_crd(o["metadata"]["name"], o)
        for o in items:
            key = self._key_of(o)
            if key:
                p, ns, name = _split(key)
                self._index.setdefault(p, {}).setdefault(ns, {})[name] = Entry(o)
        self.rev = rev
        self.oldest = rev
        self._events.clear()
        self._wake()

    def _key_of(self, o: dict[str, Any]) -> str | None:
        from nodeagent.api.resources import by_kind

        r = by_kind(o.get("apiVersion", ""), o.get("kind", ""))
        if r is None:
            return None
        return r.key((o.get("metadata") or {}).get("namespace"), o["metadata"]["name"])

    async def _run(self) -> None:
        while True:
            try:
                async for ev in self.store.watch(ROOT, self.rev):
                    self._apply(ev)
                await asyncio.sleep(0.1)  # the store ended the stream (closing): resume if it comes back
            except store_base.Gone:
                if self.rev >= self.store.compacted:
                    continue  # we only fell behind the live feed: resume from the log
                log.warning("watch cache fell behind compaction; rebuilding")
                await self._fill()
                for s in list(self._subs):  # their position is lost: end their streams, clients re-watch
                    s.queue.put_nowait(None)
                self._subs.clear()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("watch cache: store watch failed; restarting")
                await asyncio.sleep(0.5)

    def _apply(self, ev: store_base.Event) -> None:
        p, ns, name = _split(ev.key)
        if ev.key.startswith(CRD_PREFIX):
            sync_crd(name, None if ev.type == "DELETED" else ev.object)
        if ev.type == "DELETED":
            names = self._index.get(p, {}).get(ns)
            old = names.pop(name, None) if names is not None else None
        else:
            names = self._index.setdefault(p, {}).setdefault(ns, {})
            old = names.get(name)
            names[name] = Entry(ev.object)
        cev = CachedEvent(ev)
        if old is not None and ev.prev is not None and _same_version(old.obj, ev.prev):
            cev.prev = old.obj  # the dict the cache already holds, not a second decoded copy of it
        events = self._events
        events.append(cev)
        if len(events) == events.maxlen:
            self.oldest = events[0].revision - 1
        # Revisions at or below the store's compaction are never served again (`subscribe` answers Gone):
        # drop them, so the window holds one compaction interval of history rather than `window` events.
        compacted = self.store.compacted
        while events and events[0].revision <= compacted:
            events.popleft()
        self.rev = ev.revision
        slow = []
        for s in self._subs:
            if ev.key.startswith(s.prefix) and ev.revision > s.since:
                if s.direct is not None:
                    if not s.direct(cev.line):
                        slow.append(s)
                elif s.queue.qsize() >= self.max_backlog:
                    slow.append(s)
                else:
                    s.queue.put_nowait(cev)
        for s in slow:  # a watcher that cannot keep up is ended, as kube-apiserver does; it re-watches
            self._subs.discard(s)
            s.queue.put_nowait(None)
        self._wake()

    def _wake(self) -> None:
        """Resolve the wait_fresh callers the cache has caught up with."""
        waiters, rev = self._waiters, self.rev
        while waiters and waiters[0][0] <= rev:
            fut = waiters.popleft()[2]
            if not fut.done():
                fut.set_result(None)

    async def wait_fresh(self, limit_s: float = 10.0) -> None:
        """Wait until every write the store has committed is in the cache (read-your-writes); TimeoutError
        after `limit_s`. Nearly every write waits here for a moment, so a waiter is a future resolved by
        `_wake` and one coarse timer sweeps the late ones (a timer per waiter filled the loop's heap with
        cancelled timers under load)."""
        await self.wait_for(self.store.revision, limit_s)

    async def wait_for(self, target: int, limit_s: float = 10.0) -> None:
        """Wait until the cache has reached revision `target`; TimeoutError after `limit_s`."""
        if self.rev >= target:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        waiters = self._waiters
        if waiters and waiters[-1][0] > target:  # rare (a rebuilt store): keep the deque in revision order
            waiters.append((target, loop.time() + limit_s, fut))
            self._waiters = collections.deque(sorted(waiters, key=lambda w: w[0]))
        else:
            waiters.append((target, loop.time() + limit_s, fut))
        if self._sweeper is None:
            self._sweeper = loop.call_later(SWEEP_S, self._sweep)
        await fut

    def _sweep(self) -> None:
        """Fail the waiters past their deadline; again in SWEEP_S while any wait."""
        self._sweeper = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        kept: collections.deque[tuple[int, float, asyncio.Future[None]]] = collections.deque()
        for w in self._waiters:
            if w[2].done():
                continue
            if w[1] <= now:
                w[2].set_exception(TimeoutError())
            else:
                kept.append(w)
        self._waiters = kept
        if kept:
            self._sweeper = loop.call_later(SWEEP_S, self._sweep)

    # ------------------------------------------------------------------ reads
    def get(self, key: str) -> Entry | None:
        p, ns, name = _split(key)
        return self._index.get(p, {}).get(ns, {}).get(name)

    def list(self, res_prefix: str, ns: str | None) -> tuple[list[Entry], int]:
        by_ns = self._index.get(res_prefix, {})
        out: list[Entry] = []
        for n in ([ns] if ns is not None else sorted(by_ns)):
            names = by_ns.get(n) or {}
            out += [names[k] for k in sorted(names)]
        return out, self.rev

    def unchanged_since(self, prefix: str, revision: int) -> bool:
        """Whether nothing under `prefix` changed after `revision` (up to the cache's own), so that the
        cache's current objects there are the state at `revision`: false when the window no longer
        reaches back to it."""
        if revision > self.rev or revision < max(self.oldest, self.store.compacted):
            return False
        for e in reversed(self._events):
            if e.revision <= revision:
                break
            if e.key.startswith(prefix):
                return False
        return True

    # ------------------------------------------------------------------ watch
    def subscribe(self, prefix: str, since: int | None, initial: bool = False) -> Subscriber:
        """A queue holding, in order: ('initial', Entry) for the current state (when since is None or
        `initial`), ('synced', revision), then every CachedEvent after that revision as it happens;
        or ('gone', (since, oldest)) and None when `since` is older than the window. Unsubscribe when done.

        Everything is queued synchronously, so an empty queue means this watcher has been given every
        change up to `self.rev` (what makes a bookmark at `self.rev` safe).
        """
        sub = Subscriber(prefix)
        q = sub.queue
        if since is None or initial:
            res_prefix, ns = split_prefix(prefix)
            snapshot, since = self.list(res_prefix, ns)
            for en in snapshot:
                q.put_nowait(("initial", en))
        elif since < max(self.oldest, self.store.compacted):
            q.put_nowait(("gone", (since, max(self.oldest, self.store.compacted))))
            q.put_nowait(None)
            return sub
        q.put_nowait(("synced", since))
        if since < self.rev:
            for e in self._events:
                if e.revision > since and e.key.startswith(prefix):
                    q.put_nowait(e)
        sub.since = since
        self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self._subs.discard(sub)

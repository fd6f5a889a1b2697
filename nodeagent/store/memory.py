"""An in-memory store: the reference implementation of the contract, for tests and benchmarks."""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator

from nodeagent.api.objects import copy_object
from nodeagent.store.base import (
    AlreadyExists,
    Conflict,
    Event,
    EventType,
    FutureRevision,
    Gone,
    NotFound,
    rewind,
    with_revision,
)
from nodeagent.store.fanout import DEFAULT_QUEUE, FanOut


class MemoryStore:
    """Single event loop, no persistence. Watchers get a bounded queue each; history is kept until
    compaction."""

    def __init__(self, watch_queue: int = DEFAULT_QUEUE) -> None:
        self._data: dict[str, dict] = {}
        self._keys: list[str] = []  # sorted, for prefix lists
        self._history: list[Event] = []
        self._rev = 1  # as in etcd: an empty store is at revision 1
        self._compacted = 0
        self._fanout = FanOut(watch_queue)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        self._fanout.close()

    @property
    def revision(self) -> int:
        return self._rev

    @property
    def compacted(self) -> int:
        return self._compacted

    def _commit(self, type_: EventType, key: str, obj: dict, prev: dict | None) -> Event:
        ev = Event(type_, key, obj, self._rev, prev)
        self._history.append(ev)
        self._fanout.publish(ev)
        return ev

    async def create(self, key: str, obj: dict) -> dict:
        if key in self._data:
            raise AlreadyExists(key)
        self._rev += 1
        stored = with_revision(copy_object(obj), self._rev)
        self._data[key] = stored
        bisect.insort(self._keys, key)
        self._commit("ADDED", key, stored, None)
        return copy_object(stored)

    async def get(self, key: str, *, shared: bool = False) -> dict:
        try:
            return self._data[key] if shared else copy_object(self._data[key])
        except KeyError:
            raise NotFound(key) from None

    async def list_at(self, prefix: str, revision: int) -> list[dict]:
        if revision > self._rev:
            raise FutureRevision(prefix, revision, self._rev)
        if revision < self._compacted:
            raise Gone(prefix, revision, self._compacted)
        start = bisect.bisect_right(self._history, revision, key=lambda e: e.revision)
        changes = [(e.type, e.key, e.prev) for e in self._history[start:] if e.key.startswith(prefix)]
        current = {k: self._data[k] for k in self._keys if k.startswith(prefix)}
        return [copy_object(o) for o in rewind(prefix, revision, current, changes)]

    async def list(self, prefix: str) -> tuple[list[dict], int]:
        i = bisect.bisect_left(self._keys, prefix)
        out = []
        while i < len(self._keys) and self._keys[i].startswith(prefix):
            out.append(copy_object(self._data[self._keys[i]]))
            i += 1
        return out, self._rev

    async def update(self, key: str, obj: dict, expected_revision: int | None = None, *,
                     owned: bool = False) -> dict:
        prev = self._data.get(key)
        if prev is None:
            raise NotFound(key)
        if expected_revision is not None and int(prev["metadata"]["resourceVersion"]) != expected_revision:
            raise Conflict(key)
        self._rev += 1
        stored = with_revision(obj if owned else copy_object(obj), self._rev)
        self._data[key] = stored
        self._commit("MODIFIED", key, stored, prev)
        return stored if owned else copy_object(stored)

    async def delete(self, key: str, expected_revision: int | None = None) -> dict:
        prev = self._data.get(key)
        if prev is None:
            raise NotFound(key)
        if expected_revision is not None and int(prev["metadata"]["resourceVersion"]) != expected_revision:
            raise Conflict(key)
        self._rev += 1
        del self._data[key]
        self._keys.pop(bisect.bisect_left(self._keys, key))
        last = with_revision(prev, self._rev)
        self._commit("DELETED", key, last, prev)
        return copy_object(last)

    async def watch(self, prefix: str, since: int) -> AsyncIterator[Event]:
        if since == 0:
            since = self._rev
        if since < self._compacted:
            raise Gone(prefix, since, self._compacted)
        # Replay and subscribe with no await in between: nothing can commit in the gap.
        start = bisect.bisect_right(self._history, since, key=lambda e: e.revision)
        backlog = [e for e in self._history[start:] if e.key.startswith(prefix)]
        w = self._fanout.subscribe(prefix, max(since, self._rev))
        try:
            for ev in backlog:
                yield ev
            while (live := await w.next()) is not None:
                yield live
        finally:
            self._fanout.unsubscribe(w)

    async def compact(self, revision: int) -> None:
        revision = min(revision, self._rev)
        self._compacted = max(self._compacted, revision)
        self._history = [e for e in self._history if e.revision > self._compacted]

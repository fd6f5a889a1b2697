"""An in-memory store: the reference implementation of the contract, for tests and benchmarks."""

from __future__ import annotations

import asyncio
import bisect
import copy
from collections.abc import AsyncIterator

from nodeagent.store.base import AlreadyExists, Conflict, Event, Gone, NotFound, with_revision


class MemoryStore:
    """Single event loop, no persistence. Watchers get a queue each; history is kept until compaction."""

    def __init__(self) -> None:
        self._data: dict[str, dict] = {}
        self._keys: list[str] = []  # sorted, for prefix lists
        self._history: list[Event] = []
        self._rev = 0
        self._compacted = 0
        self._watchers: set[tuple[str, asyncio.Queue]] = set()

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        for _, q in list(self._watchers):
            q.put_nowait(None)

    @property
    def revision(self) -> int:
        return self._rev

    @property
    def compacted(self) -> int:
        return self._compacted

    def _commit(self, type_: str, key: str, obj: dict, prev: dict | None) -> Event:
        ev = Event(type_, key, obj, self._rev, prev)  # type: ignore[arg-type]
        self._history.append(ev)
        for prefix, q in self._watchers:
            if key.startswith(prefix):
                q.put_nowait(ev)
        return ev

    async def create(self, key: str, obj: dict) -> dict:
        if key in self._data:
            raise AlreadyExists(key)
        self._rev += 1
        stored = with_revision(copy.deepcopy(obj), self._rev)
        self._data[key] = stored
        bisect.insort(self._keys, key)
        self._commit("ADDED", key, stored, None)
        return copy.deepcopy(stored)

    async def get(self, key: str) -> dict:
        try:
            return copy.deepcopy(self._data[key])
        except KeyError:
            raise NotFound(key) from None

    async def list(self, prefix: str) -> tuple[list[dict], int]:
        i = bisect.bisect_left(self._keys, prefix)
        out = []
        while i < len(self._keys) and self._keys[i].startswith(prefix):
            out.append(copy.deepcopy(self._data[self._keys[i]]))
            i += 1
        return out, self._rev

    async def update(self, key: str, obj: dict, expected_revision: int | None = None) -> dict:
        prev = self._data.get(key)
        if prev is None:
            raise NotFound(key)
        if expected_revision is not None and int(prev["metadata"]["resourceVersion"]) != expected_revision:
            raise Conflict(key)
        self._rev += 1
        stored = with_revision(copy.deepcopy(obj), self._rev)
        self._data[key] = stored
        self._commit("MODIFIED", key, stored, prev)
        return copy.deepcopy(stored)

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
        return copy.deepcopy(last)

    async def watch(self, prefix: str, since: int) -> AsyncIterator[Event]:
        if since < self._compacted:
            raise Gone(prefix, since, self._compacted)
        q: asyncio.Queue = asyncio.Queue()
        entry = (prefix, q)
        # Replay and subscribe with no await in between: nothing can commit in the gap.
        start = bisect.bisect_right([e.revision for e in self._history], since)
        backlog = [e for e in self._history[start:] if e.key.startswith(prefix)]
        self._watchers.add(entry)
        try:
            for ev in backlog:
                yield ev
            while True:
                ev = await q.get()
                if ev is None:
                    return
                yield ev
        finally:
            self._watchers.discard(entry)

    async def compact(self, revision: int) -> None:
        revision = min(revision, self._rev)
        self._compacted = max(self._compacted, revision)
        self._history = [e for e in self._history if e.revision > self._compacted]

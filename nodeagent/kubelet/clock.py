"""The clock every time-dependent kubelet part takes (backoff, probes, eviction grace, PLEG health).

`now()` is wall-clock seconds since the epoch (timestamps in statuses); `sleep()` waits. Tests pass a
`FakeClock` and move time with `advance()`; sleepers wake when their deadline is reached.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """Time that only moves when told to; `sleep` returns once `advance` passes its deadline."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), fut))
        await fut

    def advance(self, seconds: float) -> None:
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, f in self._sleepers if not f.done())


def rfc3339(ts: float) -> str:
    """A Kubernetes metav1.Time string (second precision, UTC, "Z")."""
    return _rfc3339(int(ts))


@functools.lru_cache(maxsize=4096)
def _rfc3339(seconds: int) -> str:
    # Statuses repeat the same few timestamps (start times, transitions): format each once.
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(s: str) -> float:
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()

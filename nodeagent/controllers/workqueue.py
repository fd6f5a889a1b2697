"""A rate-limited work queue with client-go's semantics, for asyncio controllers.

A key is queued at most once; a key being processed that is added again is
marked dirty and re-queued when its worker calls `done`, so one key is never
processed by two workers at once and the latest state always gets a pass.
Failures back off per key (exponential, 5 ms doubling to 1000 s) combined with
an overall token bucket (10 qps, burst 100), like DefaultControllerRateLimiter.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from nodeagent.clock import REAL_CLOCK, Clock

K = TypeVar("K", bound=Hashable)


class RateLimiter(Protocol):
    """When an item may be retried, and how often it has been."""

    def when(self, item: Hashable) -> float: ...
    def forget(self, item: Hashable) -> None: ...
    def retries(self, item: Hashable) -> int: ...


class ExponentialLimiter:
    """Per-item exponential failure backoff: base × 2^failures, capped."""

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        self.base, self.cap = base, cap
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        n = self._failures.get(item, 0)
        self._failures[item] = n + 1
        return min(self.base * (2 ** n), self.cap)

    def forget(self, item: Hashable) -> None:
        self._failures.pop(item, None)

    def retries(self, item: Hashable) -> int:
        return self._failures.get(item, 0)


class BucketLimiter:
    """Overall token bucket: `qps` tokens per second, up to `burst` saved."""

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock = REAL_CLOCK) -> None:
        self.qps, self.burst, self.clock = qps, burst, clock
        self._tokens = float(burst)
        self._last = clock.monotonic()

    def when(self, item: Hashable) -> float:
        now = self.clock.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, item: Hashable) -> None:
        return None

    def retries(self, item: Hashable) -> int:
        return 0


class MaxOfLimiter:
    def __init__(self, *limiters: RateLimiter) -> None:
        self.limiters = limiters

    def when(self, item: Hashable) -> float:
        return max(lim.when(item) for lim in self.limiters)

    def forget(self, item: Hashable) -> None:
        for lim in self.limiters:
            lim.forget(item)

    def retries(self, item: Hashable) -> int:
        return max(lim.retries(item) for lim in self.limiters)


def default_limiter(clock: Clock = REAL_CLOCK) -> MaxOfLimiter:
    return MaxOfLimiter(ExponentialLimiter(), BucketLimiter(clock=clock))


class ShutDown(Exception):
    """The queue was shut down: workers return."""


class WorkQueue(Generic[K]):
    """Dedupe + dirty/processing sets + delayed adds + rate-limited re-adds, of keys of type K."""

    def __init__(self, limiter: RateLimiter | None = None, clock: Clock = REAL_CLOCK) -> None:
        self.clock = clock
        self.limiter = limiter or default_limiter(clock)
        self._queue: collections.deque[K] = collections.deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._waiting: list[tuple[float, int, K]] = []  # (ready at, seq, item)
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._shutdown = False

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, item: K) -> None:
        if self._shutdown or item in self._dirty:
            return
        self._dirty.add(item)
        if item not in self._processing:
            self._queue.append(item)
            self._notify()

    def add_after(self, item: K, delay: float) -> None:
        if self._shutdown:
            return
        if delay <= 0:
            self.add(item)
            return
        heapq.heappush(self._waiting, (self.clock.monotonic() + delay, next(self._seq), item))
        self._arm()

    def add_rate_limited(self, item: K) -> None:
        self.add_after(item, self.limiter.when(item))

    def forget(self, item: K) -> None:
        self.limiter.forget(item)

    def retries(self, item: K) -> int:
        return self.limiter.retries(item)

    async def get(self) -> K:
        """The next key to process; call `done(key)` when finished. Raises ShutDown when drained."""
        while True:
            self._promote()
            if self._queue:
                item = self._queue.popleft()
                self._processing.add(item)
                self._dirty.discard(item)
                return item
            if self._shutdown:
                raise ShutDown
            # No await between the check above and clear(): a concurrent add cannot be missed.
            self._wake.clear()
            timeout = max(0.0, self._waiting[0][0] - self.clock.monotonic()) if self._waiting else None
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that arrives as the
            # event fires, leaving a worker waiting forever and its controller unable to stop.
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def done(self, item: K) -> None:
        self._processing.discard(item)
        if item in self._dirty:
            self._queue.append(item)
            self._notify()

    def shutdown(self) -> None:
        self._shutdown = True
        self._notify()

    def _promote(self) -> None:
        now = self.clock.monotonic()
        while self._waiting and self._waiting[0][0] <= now:
            _, _, item = heapq.heappop(self._waiting)
            self.add(item)

    def _arm(self) -> None:
        # Wake waiting getters so they recompute how long to sleep for the earliest delayed item.
        self._notify()

    def _notify(self) -> None:
        self._wake.set()

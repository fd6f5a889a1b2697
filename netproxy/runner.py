"""A bounded-frequency runner (kube-proxy's async.BoundedFrequencyRunner) for asyncio.

`run()` asks for a sync soon; syncs never run closer than `min_interval`, a
periodic one runs at least every `max_interval` (the full resync that repairs
drift), and a failed sync is retried after `retry_interval`. Bursts of change
collapse into one sync: the function reads the latest desired state itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("netproxy.runner")

SyncFn = Callable[[bool], Awaitable[None]]  # fn(periodic)


class BoundedFrequencyRunner:
    def __init__(self, fn: SyncFn, min_interval: float, max_interval: float, retry_interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, name: str = "sync") -> None:
        if min_interval > max_interval:
            raise ValueError("min_interval must not exceed max_interval")
        self._fn = fn
        self.min_interval, self.max_interval, self.retry_interval = min_interval, max_interval, retry_interval
        self._clock = clock
        self._name = name
        self._wake = asyncio.Event()
        self._last_run: float | None = None
        self._retry_at: float | None = None
        self.runs = 0
        self.failures = 0

    def run(self) -> None:
        """Request a sync as soon as min_interval allows (callable from the loop thread)."""
        self._wake.set()

    def _next_deadline(self) -> float:
        now = self._clock()
        due = (self._last_run or now) + self.max_interval
        if self._retry_at is not None:
            due = min(due, self._retry_at)
        return due

    async def loop(self, ready: asyncio.Event | None = None) -> None:
        """Run forever (until cancelled)."""
        if ready is not None:
            ready.set()
        while True:
            timeout = max(0.0, self._next_deadline() - self._clock())
            try:
                async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can lose a cancel
                    await self._wake.wait()
                periodic = False
            except TimeoutError:
                periodic = self._retry_at is None or self._clock() < self._retry_at
            if self._last_run is not None:
                gap = self._last_run + self.min_interval - self._clock()
                if gap > 0:
                    await asyncio.sleep(gap)
            self._wake.clear()
            self._last_run = self._clock()
            self._retry_at = None
            self.runs += 1
            try:
                await self._fn(periodic)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.failures += 1
                self._retry_at = self._clock() + self.retry_interval
                log.exception("%s failed; retrying in %.1fs", self._name, self.retry_interval)

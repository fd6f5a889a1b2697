"""The one clock: a component that decides something by time takes a `Clock` instead of reading the time.

`now()` is wall-clock seconds since the epoch (timestamps written into objects, expiry against them),
`monotonic()` is seconds that only ever move forward (intervals: backoff, grace periods, TTLs, deadlines,
rate limits, periods), `sleep()` waits. `REAL_CLOCK` is the default; tests and benchmarks pass
`nodeagent.testing.clock.FakeClock` and move time by hand.

The rule: time that drives behaviour (a deadline, timeout, TTL, expiry, backoff, grace period, rate limit
or period, and any timestamp written into an object or compared with one) comes from the injected clock.
Pure measurement — a duration that is only logged or exported as a metric, and benchmarks — may call
`time.perf_counter()` / `time.monotonic()` directly, since nothing reads it back to decide. So may code that
waits for a real process or file outside any component (the test harness, the `lab` command starting
processes): nothing there can be faked. A name that only has to be unique (an Event's suffix) is not time.
This module imports only the standard library, so every layer above the kernel may use it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (only differences mean anything)."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


REAL_CLOCK: Clock = RealClock()


def utcnow(clock: Clock) -> dt.datetime:
    """The clock's wall time as an aware UTC datetime (for API timestamps and certificate validity)."""
    return dt.datetime.fromtimestamp(clock.now(), dt.UTC)

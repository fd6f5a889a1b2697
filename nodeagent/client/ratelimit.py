"""A client's request rate limit: client-go's token bucket (flowcontrol.NewTokenBucketRateLimiter).

The kubelet limits its API client with --kube-api-qps/--kube-api-burst (defaults 50 and 100): `burst`
requests go at once, then `qps` a second. A request waits for its token (client-go's `Wait`), it is never
refused. As in client-go's rest.Config, a qps of 0 means the default 5/s and a burst of 0 the default 10.
"""

from __future__ import annotations

import asyncio

from nodeagent.clock import REAL_CLOCK, Clock

DEFAULT_QPS = 5.0  # client-go rest.DefaultQPS
DEFAULT_BURST = 10  # client-go rest.DefaultBurst


class TokenBucket:
    def __init__(self, qps: float, burst: int, clock: Clock = REAL_CLOCK) -> None:
        if qps < 0 or burst < 0:
            raise ValueError(f"rate limit qps {qps:g}, burst {burst}: must not be negative")
        self.qps = float(qps) or DEFAULT_QPS
        self.burst = int(burst) or DEFAULT_BURST
        self.clock = clock
        self._tokens = float(self.burst)
        self._at = clock.monotonic()
        self._lock = asyncio.Lock()  # waiters take their tokens in arrival order

    def _refill(self) -> None:
        now = self.clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
        self._at = now

    async def wait(self) -> float:
        """Take one token, sleeping until one is there; returns the seconds waited (the client-go
        rest_client_rate_limiter_duration the caller may report)."""
        start = self.clock.monotonic()
        async with self._lock:
            self._refill()
            if self._tokens < 1.0:
                await self.clock.sleep((1.0 - self._tokens) / self.qps)
                self._refill()
            self._tokens -= 1.0
        return self.clock.monotonic() - start

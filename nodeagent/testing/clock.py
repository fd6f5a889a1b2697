"""The fake `Clock` tests and benchmarks share: time moves only when told to.

Wall and monotonic time are the same number `t` here, moved together by `advance()` (or set through `t`);
`sleep()` returns once `advance()` passes its deadline, and `sleepers` says how many wait.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools


class FakeClock:
    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start
        self._sleepers: list[tuple[float, int, asyncio.Future]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.t + seconds, next(self._seq), fut))
        await fut

    def advance(self, seconds: float) -> None:
        self.t += seconds
        while self._sleepers and self._sleepers[0][0] <= self.t:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, f in self._sleepers if not f.done())

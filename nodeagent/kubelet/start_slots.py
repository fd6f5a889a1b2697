"""How many pods are in the CPU-bound part of their start at once (`--max-parallel-pod-starts`).

With one worker per pod (kubelet's pod workers) a burst of 110 pods interleaves every pod's sandbox and
container set-up, so all of them finish near the end. A slot is held for the node's work of a pod's start
(its volumes, cgroup, RunPodSandbox, CreateContainer, StartContainer); a pod gives its slot back while it
waits on something else (an image pull, a postStart hook, a volume set-up that takes long), so a pod stuck
in its start never blocks the others. Slots are handed out first come, first served (the pods' arrival
order). `limit` 0: no limit (kubelet's behaviour).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable


class StartSlots:
    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"--max-parallel-pod-starts {limit}: must not be negative")
        self.limit = limit
        self._sem = asyncio.Semaphore(limit) if limit else None
        self._holders: set[str] = set()
        self.waiting = 0  # pods waiting for a slot now (a gauge)

    def holding(self, uid: str) -> bool:
        return uid in self._holders

    async def _acquire(self, on_wait: Callable[[], None] | None = None) -> None:
        if self._sem is None:
            return
        if self._sem.locked() and on_wait is not None:
            on_wait()
        self.waiting += 1
        try:
            await self._sem.acquire()
        finally:
            self.waiting -= 1

    @contextlib.asynccontextmanager
    async def slot(self, uid: str, on_wait: Callable[[], None] | None = None) -> AsyncIterator[None]:
        """Hold a slot for the pod `uid` for the block (re-entrant: a pod already holding one keeps it);
        `on_wait()` is called first when it has to wait for one (its status can say it is pending)."""
        if uid in self._holders:
            yield
            return
        await self._acquire(on_wait)
        self._holders.add(uid)
        try:
            yield
        finally:
            if uid in self._holders:
                self._holders.discard(uid)
                if self._sem is not None:
                    self._sem.release()

    @contextlib.asynccontextmanager
    async def released(self, uid: str) -> AsyncIterator[None]:
        """Give the pod's slot back for the block (it waits on something other than CPU) and take one
        again after it; a pod holding none just runs the block."""
        if uid not in self._holders:
            yield
            return
        self._holders.discard(uid)
        if self._sem is not None:
            self._sem.release()
        try:
            yield
        finally:
            await self._acquire()
            self._holders.add(uid)

"""Pod workers (kubelet pod_workers.go): one task per pod with a coalescing "latest update wins" slot.

Each pod moves through explicit phases, sync → terminating → terminated. `update(pod)` only stores the
newest desired pod and wakes the worker; PLEG events and resync ticks wake it too. The work itself is
the injected `sync(pod)` / `terminate(pod)` coroutines, so this file is pure scheduling.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kernel.ordered_executor import AFTER_STARTS, WORK_ORDER
from nodeagent.clock import REAL_CLOCK, Clock

log = logging.getLogger("nodeagent.kubelet.workers")

SyncFn = Callable[[dict[str, Any]], Awaitable[float | None]]  # returns seconds until it wants a resync
TerminateFn = Callable[[dict[str, Any]], Awaitable[None]]


class Phase(enum.StrEnum):
    SYNC = "sync"
    TERMINATING = "terminating"
    TERMINATED = "terminated"


class _Worker:
    def __init__(self, pod: dict[str, Any], order: int) -> None:
        self.pod = pod  # the latest desired pod (the coalescing slot)
        self.order = order  # when this worker first saw the pod, among all pods: its thread work's rank
        self.wake = asyncio.Event()
        self.phase = Phase.SYNC
        self.removed = False  # gone from every source: terminate even without a deletionTimestamp
        self.task: asyncio.Task[None] | None = None
        self.synced_at: float | None = None
        self.terminating_at: float | None = None
        self.terminated_at: float | None = None


class PodWorkers:
    def __init__(self, tg: asyncio.TaskGroup, sync: SyncFn, terminate: TerminateFn,
                 clock: Clock | None = None, resync: float = 10.0, retry: float = 1.0) -> None:
        self.tg = tg
        self._sync = sync
        self._terminate = terminate
        self.clock = clock or REAL_CLOCK
        self.resync = resync
        self.retry = retry
        self.workers: dict[str, _Worker] = {}
        self.finished: set[str] = set()  # terminated pods: later updates about them are ignored
        self._arrivals = itertools.count()

    # -- public predicates (pod_workers.go's IsPodTerminationRequested & co) ----------------------
    def phase(self, uid: str) -> Phase | None:
        w = self.workers.get(uid)
        return w.phase if w else None

    def is_terminating(self, uid: str) -> bool:
        return self.phase(uid) == Phase.TERMINATING

    def known(self) -> set[str]:
        return set(self.workers)

    # -- inputs ------------------------------------------------------------------------------------
    def update(self, pod: dict[str, Any], wake: bool = True) -> None:
        """Record the newest desired pod for its worker (starting one if needed) and wake it (unless only
        its status changed: that is our own write coming back, nothing to do for it)."""
        uid = pod["metadata"]["uid"]
        if uid in self.finished:
            return
        w = self.workers.get(uid)
        if w is None:
            w = self.workers[uid] = _Worker(pod, next(self._arrivals))
            w.task = self.tg.create_task(self._run(uid, w), name=f"pod-{uid[:8]}")
        else:
            w.pod = pod
            if not wake:
                return
        w.wake.set()

    def remove(self, pod: dict[str, Any]) -> None:
        """The pod left every source: terminate it."""
        uid = pod["metadata"]["uid"]
        if uid in self.finished:
            return
        if uid not in self.workers:
            self.update(pod)
        w = self.workers[uid]
        w.removed = True
        w.wake.set()

    def poke(self, uid: str) -> None:
        """A runtime event for this pod (PLEG): resync it now."""
        w = self.workers.get(uid)
        if w is not None:
            w.wake.set()

    async def stop(self) -> None:
        for w in list(self.workers.values()):
            if w.task is not None:
                w.task.cancel()

    # -- the worker loop ---------------------------------------------------------------------------
    async def _run(self, uid: str, w: _Worker) -> None:
        wait = 0.0
        try:
            while True:
                if wait > 0:
                    try:
                        async with asyncio.timeout(wait):  # not wait_for: on 3.11 it can lose a cancel
                            await w.wake.wait()
                    except TimeoutError:
                        pass
                w.wake.clear()
                pod = w.pod
                if w.removed or pod["metadata"].get("deletionTimestamp"):
                    w.phase = Phase.TERMINATING
                    w.terminating_at = self.clock.now()
                    WORK_ORDER.set(w.order)
                    try:
                        await self._terminate(pod)
                    except Exception:
                        log.exception("terminating pod %s failed; retrying", uid)
                        wait = self.retry
                        continue
                    w.phase = Phase.TERMINATED
                    w.terminated_at = self.clock.now()
                    self.finished.add(uid)
                    return
                # the pod's blocking work in the default executor (the runtime's, the CNI's, its volumes') is
                # taken in the pods' arrival order until its first sync has gone through, and behind every
                # start after that: in a burst pods finish in about the order they came instead of all
                # together at the end, and the later syncs of those running do not hold up the starts
                WORK_ORDER.set(w.order if w.synced_at is None else AFTER_STARTS + w.order)
                try:
                    nxt = await self._sync(pod)
                    w.synced_at = self.clock.now()
                    wait = self.resync if nxt is None else max(0.05, min(nxt, self.resync))
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.warning("sync of pod %s failed: %s", uid, e)
                    wait = self.retry
        finally:
            if self.workers.get(uid) is w and w.phase == Phase.TERMINATED:
                del self.workers[uid]

"""The scheduling queue: activeQ, backoffQ and the unschedulable pool, with the nominator.

activeQ is a heap ordered by the profile's QueueSort key (priority, then arrival). A pod that
failed goes to the unschedulable pool with the plugins that rejected it; a cluster event moves
it out only if one of those plugins registered for that event (and its hint agrees), into
backoffQ while its exponential backoff (initial * 2^(attempts-1), capped) runs, else activeQ.
Pods that errored go straight to backoffQ. Gated pods (PreEnqueue rejects) wait in the pool until
their own update clears the gates. Pods parked longer than the max are flushed back periodically.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable
from typing import Any

from nodeagent.clock import REAL_CLOCK, Clock
from nodeagent.scheduler.framework.interface import ActionType, ClusterEvent, ClusterEventWithHint
from nodeagent.scheduler.framework.types import PodInfo, QueuedPodInfo

log = logging.getLogger("nodeagent.scheduler.queue")

# Events every pod is moved on, whatever rejected it (kube-scheduler's UnschedulableTimeout etc.)
WILDCARD = ClusterEvent("*", ActionType.ALL, "WildCardEvent")
ASSIGNED_POD_DELETE = ClusterEvent("Pod", ActionType.DELETE, "AssignedPodDelete")


class SchedulingQueue:
    def __init__(self, sort_key: Callable[[QueuedPodInfo], tuple[Any, ...]],
                 pre_enqueue: Callable[[PodInfo], Any] | None = None,
                 events: dict[str, list[ClusterEventWithHint]] | None = None,
                 clock: Clock | None = None, initial_backoff: float = 1.0, max_backoff: float = 10.0,
                 max_unschedulable: float = 300.0):
        self.sort_key = sort_key
        self.pre_enqueue = pre_enqueue
        self.events = events or {}
        self.clock = clock or REAL_CLOCK
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_unschedulable = max_unschedulable
        self._seq = itertools.count()
        self._active: list[tuple[tuple[Any, ...], int, str]] = []
        self._backoff: list[tuple[float, int, str]] = []
        self._where: dict[str, str] = {}  # uid -> "active" | "backoff" | "unschedulable" | "inflight"
        self._info: dict[str, QueuedPodInfo] = {}
        self.unschedulable: dict[str, QueuedPodInfo] = {}
        self._wake = asyncio.Event()
        self.scheduling_cycle = 0
        self.move_request_cycle = -1
        self._closed = False
        # nominator: pods nominated to a node by preemption, seen by filters of lower-priority pods
        self.nominated: dict[str, dict[str, PodInfo]] = {}
        self._nominated_node: dict[str, str] = {}

    # -- sizes, for tests and metrics ----------------------------------------------------------------

    def pending(self) -> dict[str, int]:
        c = {"active": 0, "backoff": 0, "unschedulable": 0, "inflight": 0}
        for w in self._where.values():
            c[w] += 1
        return c

    def where(self, uid: str) -> str | None:
        return self._where.get(uid)

    # -- backoff -------------------------------------------------------------------------------------

    def backoff_duration(self, qp: QueuedPodInfo) -> float:
        d = self.initial_backoff
        for _ in range(1, qp.attempts):
            d *= 2
            if d > self.max_backoff:
                return self.max_backoff
        return min(d, self.max_backoff)

    def is_backing_off(self, qp: QueuedPodInfo) -> bool:
        return qp.attempts > 0 and self.clock.monotonic() < qp.timestamp + self.backoff_duration(qp)

    # -- internal moves ------------------------------------------------------------------------------

    def _to_active(self, qp: QueuedPodInfo) -> None:
        qp.sort_key = self.sort_key(qp)
        uid = qp.key
        self._info[uid] = qp
        self._where[uid] = "active"
        self.unschedulable.pop(uid, None)
        heapq.heappush(self._active, (qp.sort_key, next(self._seq), uid))
        self._wake.set()

    def _to_backoff(self, qp: QueuedPodInfo) -> None:
        uid = qp.key
        qp.backoff_expiry = qp.timestamp + self.backoff_duration(qp)
        self._info[uid] = qp
        self._where[uid] = "backoff"
        self.unschedulable.pop(uid, None)
        heapq.heappush(self._backoff, (qp.backoff_expiry, next(self._seq), uid))

    def _to_unschedulable(self, qp: QueuedPodInfo) -> None:
        uid = qp.key
        self._info[uid] = qp
        self._where[uid] = "unschedulable"
        self.unschedulable[uid] = qp

    def _requeue(self, qp: QueuedPodInfo) -> None:
        if self.is_backing_off(qp):
            self._to_backoff(qp)
        else:
            self._to_active(qp)

    # -- API from informers --------------------------------------------------------------------------

    def add(self, pod_info: PodInfo) -> None:
        """A new pending pod."""
        uid = pod_info.uid
        if uid in self._where:
            return self.update(pod_info)
        qp = QueuedPodInfo(pod_info, self.clock.monotonic())
        self._enqueue_new(qp)

    def _enqueue_new(self, qp: QueuedPodInfo) -> None:
        s = self.pre_enqueue(qp.pod_info) if self.pre_enqueue else None
        if s is not None and not s.is_success():
            qp.gated = True
            qp.unschedulable_plugins = {s.plugin}
            self._to_unschedulable(qp)
            return
        qp.gated = False
        self._to_active(qp)

    def update(self, pod_info: PodInfo) -> None:
        uid = pod_info.uid
        where = self._where.get(uid)
        if where is None:
            return self.add(pod_info)
        qp = self._info[uid]
        old = qp.pod_info
        qp.pod_info = pod_info
        if where == "inflight":
            return
        if where == "unschedulable":
            if qp.gated:
                self._enqueue_new(qp)
            elif _spec_changed(old, pod_info):
                self._requeue(qp)
        elif where == "active" and qp.sort_key != self.sort_key(qp):
            self._to_active(qp)  # priority changed: re-push (the stale heap entry is skipped on pop)

    def delete(self, uid: str) -> None:
        self._where.pop(uid, None)
        self._info.pop(uid, None)
        self.unschedulable.pop(uid, None)
        self.delete_nominated(uid)

    # -- pop -----------------------------------------------------------------------------------------

    def pop_nowait(self) -> QueuedPodInfo | None:
        while self._active:
            key, _, uid = heapq.heappop(self._active)
            qp = self._info.get(uid)
            if qp is None or self._where.get(uid) != "active" or qp.sort_key != key:
                continue  # stale entry
            self._where[uid] = "inflight"
            qp.attempts += 1
            if qp.initial_attempt_timestamp is None:
                qp.initial_attempt_timestamp = self.clock.monotonic()
            self.scheduling_cycle += 1
            return qp
        self._wake.clear()
        return None

    async def pop(self) -> QueuedPodInfo:
        while True:
            qp = self.pop_nowait()
            if qp is not None:
                return qp
            if self._closed:
                raise asyncio.CancelledError
            await self._wake.wait()

    def done(self, uid: str) -> None:
        """The pod left the scheduler (bound, or deleted while in flight)."""
        if self._where.get(uid) == "inflight":
            del self._where[uid]
            self._info.pop(uid, None)

    def add_unschedulable_if_not_present(self, qp: QueuedPodInfo, cycle: int, backoff: bool = False) -> None:
        """A pod the cycle couldn't place: park it (moved by events its rejecting plugins registered
        for, or by any event when none is known), or back it off if it failed with an error
        (`backoff`) or an event raced the cycle."""
        uid = qp.key
        if uid not in self._where:
            return  # deleted meanwhile
        qp.timestamp = self.clock.monotonic()
        if backoff or self.move_request_cycle >= cycle:
            self._to_backoff(qp)
        else:
            self._to_unschedulable(qp)

    # -- event-driven moves --------------------------------------------------------------------------

    def _interested(self, qp: QueuedPodInfo, event: ClusterEvent, old: Any, new: Any) -> bool:
        if not qp.unschedulable_plugins or event is WILDCARD:
            return True
        for plugin in qp.unschedulable_plugins:
            for ev in self.events.get(plugin, ()):
                if ev.event.covers(event) and (ev.hint is None or ev.hint(qp.pod_info, old, new)):
                    return True
        return False

    def move_all_to_active_or_backoff(self, event: ClusterEvent, old: Any = None, new: Any = None,
                                      pred: Callable[[QueuedPodInfo], bool] | None = None) -> int:
        moved = 0
        for qp in list(self.unschedulable.values()):
            if qp.gated or (pred is not None and not pred(qp)):
                continue
            if self._interested(qp, event, old, new):
                self._requeue(qp)
                moved += 1
        self.move_request_cycle = self.scheduling_cycle
        return moved

    def activate(self, uids: list[str]) -> None:
        for uid in uids:
            qp = self._info.get(uid)
            if qp is not None and self._where.get(uid) in ("unschedulable", "backoff") and not qp.gated:
                self._to_active(qp)

    # -- periodic flushes (driven by the clock) ------------------------------------------------------

    def flush_backoff_completed(self) -> int:
        now = self.clock.monotonic()
        moved = 0
        while self._backoff and self._backoff[0][0] <= now:
            expiry, _, uid = heapq.heappop(self._backoff)
            qp = self._info.get(uid)
            if qp is None or self._where.get(uid) != "backoff" or qp.backoff_expiry != expiry:
                continue
            self._to_active(qp)
            moved += 1
        return moved

    def flush_unschedulable_leftover(self) -> int:
        now = self.clock.monotonic()
        stale = [qp for qp in self.unschedulable.values()
                 if not qp.gated and now - qp.timestamp > self.max_unschedulable]
        for qp in stale:
            self._requeue(qp)
        return len(stale)

    async def run_flushers(self, period: float = 1.0, leftover_period: float = 30.0) -> None:
        last_leftover = self.clock.monotonic()
        while True:
            await asyncio.sleep(period)
            self.flush_backoff_completed()
            if self.clock.monotonic() - last_leftover >= leftover_period:
                self.flush_unschedulable_leftover()
                last_leftover = self.clock.monotonic()

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    # -- nominator -----------------------------------------------------------------------------------

    def add_nominated(self, pod: PodInfo, node: str) -> None:
        self.delete_nominated(pod.uid)
        pod.nominated_node_name = node
        self.nominated.setdefault(node, {})[pod.uid] = pod.with_node(node)
        self._nominated_node[pod.uid] = node

    def delete_nominated(self, uid: str) -> None:
        node = self._nominated_node.pop(uid, None)
        if node is not None:
            pods = self.nominated.get(node)
            if pods is not None:
                pods.pop(uid, None)
                if not pods:
                    del self.nominated[node]

    def nominated_pods_for_node(self, node: str) -> list[PodInfo]:
        return list(self.nominated.get(node, {}).values())


def _spec_changed(old: PodInfo, new: PodInfo) -> bool:
    o, n = old.pod, new.pod
    return o.get("spec") != n.get("spec") or (o.get("metadata") or {}).get("labels") != \
        (n.get("metadata") or {}).get("labels")

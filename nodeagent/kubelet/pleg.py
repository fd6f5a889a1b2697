"""Pod lifecycle event generator (kubelet pkg/kubelet/pleg/generic.go).

Relist is a pure diff of the previous and the new runtime records: each container (and sandbox) whose
state changed yields ContainerStarted / ContainerDied / ContainerRemoved / ContainerChanged for its pod.
Health is "time since the last successful relist" against a 3-minute threshold, with an injected clock.
The caller fetches records through CRI (ListPodSandbox + ListContainers) and calls `relist(records)`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

from nodeagent.clock import REAL_CLOCK, Clock

RELIST_THRESHOLD = 180.0  # seconds: kubelet's relistThreshold


class EventType(enum.StrEnum):
    CONTAINER_STARTED = "ContainerStarted"
    CONTAINER_DIED = "ContainerDied"
    CONTAINER_REMOVED = "ContainerRemoved"
    CONTAINER_CHANGED = "ContainerChanged"
    POD_SYNC = "PodSync"


class State(enum.StrEnum):
    RUNNING = "running"
    EXITED = "exited"
    UNKNOWN = "unknown"
    NON_EXISTENT = "non-existent"


# CRI states → PLEG states (created counts as unknown, as in kubelet's convertState)
_FROM_CRI = {"running": State.RUNNING, "exited": State.EXITED, "created": State.UNKNOWN,
             "unknown": State.UNKNOWN, "ready": State.RUNNING, "notready": State.EXITED,
             "CONTAINER_RUNNING": State.RUNNING, "CONTAINER_EXITED": State.EXITED,
             "CONTAINER_CREATED": State.UNKNOWN, "CONTAINER_UNKNOWN": State.UNKNOWN,
             "SANDBOX_READY": State.RUNNING, "SANDBOX_NOTREADY": State.EXITED}


@dataclasses.dataclass(frozen=True)
class Record:
    """One container or sandbox as the runtime lists it."""

    pod_uid: str
    id: str
    state: str  # a CRI state name (running/exited/created/unknown, or the enum names)


@dataclasses.dataclass(frozen=True)
class PodLifecycleEvent:
    pod_uid: str
    type: EventType
    data: str  # the container id


def _state(s: str) -> State:
    return _FROM_CRI.get(s, State.UNKNOWN)


def generate_events(pod_uid: str, cid: str, old: State, new: State) -> list[PodLifecycleEvent]:
    """generateEvents: the events for one container's state change."""
    if old == new:
        return []
    if new == State.RUNNING:
        return [PodLifecycleEvent(pod_uid, EventType.CONTAINER_STARTED, cid)]
    if new == State.EXITED:
        return [PodLifecycleEvent(pod_uid, EventType.CONTAINER_DIED, cid)]
    if new == State.UNKNOWN:
        return [PodLifecycleEvent(pod_uid, EventType.CONTAINER_CHANGED, cid)]
    if old == State.EXITED:  # already reported dead
        return [PodLifecycleEvent(pod_uid, EventType.CONTAINER_REMOVED, cid)]
    return [PodLifecycleEvent(pod_uid, EventType.CONTAINER_DIED, cid),
            PodLifecycleEvent(pod_uid, EventType.CONTAINER_REMOVED, cid)]


def diff(old: Iterable[Record], new: Iterable[Record]) -> list[PodLifecycleEvent]:
    """Every event between two listings, grouped by pod (pods and containers in first-seen order)."""
    old_by = {(r.pod_uid, r.id): _state(r.state) for r in old}
    new_by = {(r.pod_uid, r.id): _state(r.state) for r in new}
    keys = list(dict.fromkeys(list(old_by) + list(new_by)))
    pods = list(dict.fromkeys(uid for uid, _ in keys))
    events: list[PodLifecycleEvent] = []
    for uid in pods:
        for key in keys:
            if key[0] != uid:
                continue
            events += generate_events(uid, key[1], old_by.get(key, State.NON_EXISTENT),
                                      new_by.get(key, State.NON_EXISTENT))
    return events


class GenericPLEG:
    """Keeps the last listing; `relist` returns the events since then and marks the relist time."""

    def __init__(self, clock: Clock | None = None, threshold: float = RELIST_THRESHOLD) -> None:
        self.clock = clock or REAL_CLOCK
        self.threshold = threshold
        self._records: list[Record] = []
        self._last_relist: float | None = None

    def relist(self, records: Iterable[Record]) -> list[PodLifecycleEvent]:
        """Diff against the previous listing. Call only after a successful list: a failed list is simply not
        passed in, so health degrades and the next relist diffs against the last good one."""
        new = list(records)
        events = diff(self._records, new)
        self._records = new
        self._last_relist = self.clock.now()
        return events

    @property
    def last_relist(self) -> float | None:
        return self._last_relist

    def healthy(self) -> tuple[bool, str]:
        """(ok, message): kubelet's "PLEG is not healthy: pleg was last seen active 3m0.1s ago; threshold is
        3m0s"."""
        if self._last_relist is None:
            return False, "pleg has yet to be successful"
        elapsed = self.clock.now() - self._last_relist
        if elapsed > self.threshold:
            return False, (f"pleg was last seen active {_dur(elapsed)} ago; threshold is "
                           f"{_dur(self.threshold)}")
        return True, ""

    def pod_ids(self) -> set[str]:
        return {r.pod_uid for r in self._records}


def _dur(seconds: float) -> str:
    m, s = divmod(seconds, 60)
    s_str = f"{s:.3f}".rstrip("0").rstrip(".") if s != int(s) else str(int(s))
    return f"{int(m)}m{s_str}s" if m else f"{s_str}s"

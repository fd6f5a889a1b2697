"""Container and sandbox garbage collection (kubelet kuberuntime_gc.go).

Dead containers are grouped per (pod, container name) — an "evict unit" — newest first. Units of pods that
are gone (and, when reclaiming for disk pressure, of terminal pods) lose every dead container; the others keep
`--maximum-dead-containers-per-container`; past `--maximum-dead-containers` node-wide, the units are cut
evenly, then the oldest go. Only containers older than `--minimum-container-ttl-duration` are touched.
Sandboxes with no containers left go likewise, the newest of a live pod's kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cri.client import RuntimeClient
from cri.proto import api_pb2 as pb
from nodeagent.clock import Clock
from nodeagent.kubelet.labels import CONTAINER_NAME_LABEL, POD_UID_LABEL

log = logging.getLogger("nodeagent.kubelet.gc")


@dataclasses.dataclass(frozen=True)
class ContainerGCPolicy:
    """kubecontainer.GCPolicy from the deprecated flags (kubelet's defaults)."""

    min_age: float = 0.0  # --minimum-container-ttl-duration, seconds
    max_per_pod_container: int = 1  # --maximum-dead-containers-per-container; < 0: no limit
    max_containers: int = -1  # --maximum-dead-containers; < 0: no limit


@dataclasses.dataclass(frozen=True)
class Dead:
    id: str
    pod_uid: str
    name: str
    created: float  # seconds since the epoch


def _remove_oldest(unit: list[Dead], n: int) -> tuple[list[Dead], list[Dead]]:
    """(kept, removed): the last `n` of a newest-first list go."""
    n = max(0, min(n, len(unit)))
    return unit[:len(unit) - n], unit[len(unit) - n:]


def containers_to_remove(dead: Iterable[Dead], policy: ContainerGCPolicy, now: float,
                         pod_gone: Callable[[str], bool], pod_terminal: Callable[[str], bool],
                         evict_terminal: bool = False) -> list[str]:
    """evictContainers: the ids to remove, oldest last within each decision."""
    units: dict[tuple[str, str], list[Dead]] = {}
    for d in dead:
        if d.created > now - policy.min_age:
            continue
        units.setdefault((d.pod_uid, d.name), []).append(d)
    for unit in units.values():
        unit.sort(key=lambda d: d.created, reverse=True)
    removed: list[Dead] = []
    for key in list(units):
        uid = key[0]
        if pod_gone(uid) or (evict_terminal and pod_terminal(uid)):
            removed += units.pop(key)

    def enforce(limit: int) -> None:
        nonlocal removed
        for key, unit in units.items():
            units[key], gone = _remove_oldest(unit, len(unit) - limit)
            removed += gone

    if policy.max_per_pod_container >= 0:
        enforce(policy.max_per_pod_container)
    total = sum(len(u) for u in units.values())
    if policy.max_containers >= 0 and total > policy.max_containers:
        enforce(max(1, policy.max_containers // max(1, len(units))))
        flat = sorted((d for u in units.values() for d in u), key=lambda d: d.created, reverse=True)
        if len(flat) > policy.max_containers:
            _, gone = _remove_oldest(flat, len(flat) - policy.max_containers)
            removed += gone
    return [d.id for d in removed]


@dataclasses.dataclass(frozen=True)
class Box:
    id: str
    pod_uid: str
    ready: bool
    created: float
    has_containers: bool


def sandboxes_to_remove(boxes: Iterable[Box], pod_gone: Callable[[str], bool],
                        pod_terminal: Callable[[str], bool], evict_terminal: bool = False) -> list[str]:
    """evictSandboxes: not-ready sandboxes without containers; a live pod keeps its newest sandbox."""
    by_pod: dict[str, list[Box]] = {}
    for b in boxes:
        by_pod.setdefault(b.pod_uid, []).append(b)
    out: list[str] = []
    for uid, mine in by_pod.items():
        mine.sort(key=lambda b: b.created, reverse=True)
        candidates = [b for b in mine if not b.ready and not b.has_containers]
        if pod_gone(uid) or (evict_terminal and pod_terminal(uid)):
            out += [b.id for b in candidates]
        else:
            out += [b.id for b in candidates if b is not mine[0]]
    return out


class ContainerGC:
    """Lists the runtime, decides, removes (failures are logged and retried on the next pass)."""

    def __init__(self, cri: RuntimeClient, policy: ContainerGCPolicy, clock: Clock,
                 pods: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        self.cri = cri
        self.policy = policy
        self.clock = clock
        self.pods = pods  # the pods the kubelet has (API pods bound here and static pods)

    async def collect(self, evict_terminal: bool = False) -> tuple[int, int]:
        """One GarbageCollect (evict_terminal: DeleteAllUnusedContainers, for disk pressure); returns the
        containers and sandboxes removed."""
        known = {(p.get("metadata") or {}).get("uid", ""): p for p in self.pods()}

        def gone(uid: str) -> bool:
            return uid not in known

        def terminal(uid: str) -> bool:
            return uid in known and (known[uid].get("status") or {}).get("phase") in ("Succeeded", "Failed")

        ctrs = await self.cri.list_containers()
        dead = [Dead(c.id, c.labels.get(POD_UID_LABEL, ""), c.labels.get(CONTAINER_NAME_LABEL, ""),
                     c.created_at / 1e9)
                for c in ctrs if c.state in (pb.CONTAINER_EXITED, pb.CONTAINER_UNKNOWN)
                and c.labels.get(POD_UID_LABEL)]
        ids = containers_to_remove(dead, self.policy, self.clock.now(), gone, terminal,
                                   evict_terminal)
        removed = 0
        for cid in ids:
            try:
                await self.cri.remove_container(cid)
                removed += 1
            except Exception as e:
                log.warning("container GC: removing container %s failed: %s", cid[:12], e)
        left = {c.pod_sandbox_id for c in ctrs if c.id not in set(ids)}
        boxes = [Box(s.id, s.labels.get(POD_UID_LABEL, ""), s.state == pb.SANDBOX_READY, s.created_at / 1e9,
                     s.id in left)
                 for s in await self.cri.list_pod_sandbox() if s.labels.get(POD_UID_LABEL)]
        gone_boxes = 0
        for sid in sandboxes_to_remove(boxes, gone, terminal, evict_terminal):
            with contextlib.suppress(Exception):
                await self.cri.stop_pod_sandbox(sid)
            try:
                await self.cri.remove_pod_sandbox(sid)
                gone_boxes += 1
            except Exception as e:
                log.warning("container GC: removing sandbox %s failed: %s", sid[:12], e)
        if removed or gone_boxes:
            log.info("container GC removed %d dead containers and %d sandboxes", removed, gone_boxes)
        return removed, gone_boxes

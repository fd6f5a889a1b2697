"""The node lifecycle controller's decisions: node health, zone disruption states, eviction rates, taints.

Pure logic with an injected clock (pkg/controller/nodelifecycle): a node whose
heartbeat (Lease renewal or Ready condition) has not changed for the grace
period goes Unknown; Ready False/Unknown nodes get NoExecute taints, added at a
per-zone rate (0.1 node/s normally, 0.01/s in a partially disrupted large zone,
none in a partially disrupted small one, none at all when every zone is fully
disrupted); the taint manager then evicts pods that do not tolerate the taint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.api import taints as t
from nodeagent.clock import Clock

ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"

NORMAL = "Normal"
PARTIAL = "PartialDisruption"
FULL = "FullDisruption"


@dataclasses.dataclass(frozen=True)
class Settings:
    grace_period: float = 40.0  # --node-monitor-grace-period
    eviction_rate: float = 0.1  # --node-eviction-rate (nodes/s)
    secondary_eviction_rate: float = 0.01  # --secondary-node-eviction-rate
    unhealthy_zone_threshold: float = 0.55  # --unhealthy-zone-threshold
    large_cluster_size: int = 50  # --large-cluster-size-threshold


def zone_key(node: Mapping[str, Any]) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return f"{labels.get(REGION_LABEL, '')}:\x00:{labels.get(ZONE_LABEL, '')}"


def condition(node: Mapping[str, Any], ctype: str) -> dict | None:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def ready_status(node: Mapping[str, Any]) -> str:
    c = condition(node, "Ready")
    return c.get("status", "Unknown") if c else "Unknown"


def zone_state(statuses: Iterable[str], threshold: float) -> str:
    """ComputeZoneState over the Ready statuses of a zone's nodes."""
    statuses = list(statuses)
    ready = sum(1 for s in statuses if s == "True")
    not_ready = len(statuses) - ready
    if ready == 0 and not_ready > 0:
        return FULL
    if not_ready > 2 and not_ready / len(statuses) >= threshold:
        return PARTIAL
    return NORMAL


def zone_rates(nodes: Iterable[Mapping[str, Any]], s: Settings) -> tuple[dict[str, str], dict[str, float]]:
    """(zone -> state, zone -> tainting rate in nodes/s) as handleDisruption sets them."""
    by_zone: dict[str, list[str]] = {}
    for n in nodes:
        by_zone.setdefault(zone_key(n), []).append(ready_status(n))
    states = {z: zone_state(st, s.unhealthy_zone_threshold) for z, st in by_zone.items()}
    if states and all(st == FULL for st in states.values()):
        return states, dict.fromkeys(states, 0.0)
    rates = {}
    for z, st in states.items():
        if st == PARTIAL:
            rates[z] = s.secondary_eviction_rate if len(by_zone[z]) > s.large_cluster_size else 0.0
        else:
            rates[z] = s.eviction_rate
    return states, rates


@dataclasses.dataclass
class HeartbeatTracker:
    """When we last saw each node's heartbeat change, by our own clock (probeTimestamp)."""

    clock: Clock
    _seen: dict[str, tuple[str, float]] = dataclasses.field(default_factory=dict)

    def observe(self, node_name: str, heartbeat: str) -> None:
        prev = self._seen.get(node_name)
        if prev is None or prev[0] != heartbeat:
            self._seen[node_name] = (heartbeat, self.clock.monotonic())

    def silent_for(self, node_name: str) -> float:
        prev = self._seen.get(node_name)
        return 0.0 if prev is None else self.clock.monotonic() - prev[1]

    def forget(self, node_name: str) -> None:
        self._seen.pop(node_name, None)


def heartbeat_of(node: Mapping[str, Any], lease: Mapping[str, Any] | None) -> str:
    """What counts as a heartbeat: the Lease's renewTime, else the Ready condition's heartbeat."""
    if lease:
        renew = (lease.get("spec") or {}).get("renewTime")
        if renew:
            return f"lease:{renew}"
    c = condition(node, "Ready") or {}
    return f"status:{c.get('lastHeartbeatTime', '')}"


def unknown_conditions(node: Mapping[str, Any], now_iso: str) -> list[dict] | None:
    """Conditions for a node whose kubelet stopped posting status, or None if already so marked."""
    conds = [dict(c) for c in (node.get("status") or {}).get("conditions") or []]
    types = {c.get("type") for c in conds}
    for ctype in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
        if ctype not in types:
            conds.append({"type": ctype, "lastHeartbeatTime": now_iso})
    changed = False
    for c in conds:
        if c.get("type") in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure") \
                and c.get("status") != "Unknown":
            c.update(status="Unknown", reason="NodeStatusUnknown",
                     message="Kubelet stopped posting node status.", lastTransitionTime=now_iso)
            changed = True
    return conds if changed else None


def wanted_taints(node: Mapping[str, Any]) -> list[dict]:
    """The node-lifecycle taints the node should carry (NoExecute for readiness, NoSchedule by condition)."""
    out = []
    ready = ready_status(node)
    if ready == "False":
        out += [{"key": t.NOT_READY, "effect": "NoExecute"}, {"key": t.NOT_READY, "effect": "NoSchedule"}]
    elif ready == "Unknown":
        out += [{"key": t.UNREACHABLE, "effect": "NoExecute"}, {"key": t.UNREACHABLE, "effect": "NoSchedule"}]
    for ctype, key in (("MemoryPressure", t.MEMORY_PRESSURE), ("DiskPressure", t.DISK_PRESSURE),
                       ("PIDPressure", t.PID_PRESSURE), ("NetworkUnavailable", t.NETWORK_UNAVAILABLE)):
        c = condition(node, ctype)
        if c and c.get("status") == "True":
            out.append({"key": key, "effect": "NoSchedule"})
    if (node.get("spec") or {}).get("unschedulable"):
        out.append({"key": t.UNSCHEDULABLE, "effect": "NoSchedule"})
    return out


MANAGED_KEYS = {t.NOT_READY, t.UNREACHABLE, t.MEMORY_PRESSURE, t.DISK_PRESSURE, t.PID_PRESSURE,
                t.NETWORK_UNAVAILABLE, t.UNSCHEDULABLE}


def reconcile_taints(node: Mapping[str, Any], now_iso: str, allow_no_execute: bool) -> list[dict] | None:
    """The node's new taint list, or None when nothing changes.

    NoExecute taints are added only when `allow_no_execute` (the zone's rate limiter
    granted a token); they are removed at once when the node recovers.
    """
    current = list((node.get("spec") or {}).get("taints") or [])
    wanted = wanted_taints(node)
    keep = [x for x in current if x.get("key") not in MANAGED_KEYS
            or any(x.get("key") == w["key"] and x.get("effect") == w["effect"] for w in wanted)]
    have = {(x.get("key"), x.get("effect")) for x in keep}
    for w in wanted:
        if (w["key"], w["effect"]) in have:
            continue
        if w["effect"] == "NoExecute" and not allow_no_execute:
            continue
        keep.append({**w, "timeAdded": now_iso} if w["effect"] == "NoExecute" else dict(w))
    if [(x.get("key"), x.get("effect")) for x in keep] == [(x.get("key"), x.get("effect")) for x in current]:
        return None
    return keep


def needs_no_execute_taint(node: Mapping[str, Any]) -> bool:
    current = {(x.get("key"), x.get("effect")) for x in (node.get("spec") or {}).get("taints") or []}
    return any(w["effect"] == "NoExecute" and (w["key"], w["effect"]) not in current
               for w in wanted_taints(node))


class ZoneLimiter:
    """A token bucket per zone whose rate follows the zone's state (burst 1, like the seed)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._buckets: dict[str, tuple[float, float, float]] = {}  # zone -> (rate, tokens, last)

    def set_rate(self, zone: str, rate: float) -> None:
        old = self._buckets.get(zone)
        if old and old[0] == rate:
            return
        now = self.clock.monotonic()
        tokens = self._refill(old, now) if old else 1.0
        self._buckets[zone] = (rate, min(tokens, 1.0) if rate > 0 else 0.0, now)

    @staticmethod
    def _refill(b: tuple[float, float, float], now: float) -> float:
        rate, tokens, last = b
        return min(1.0, tokens + (now - last) * rate)

    def try_take(self, zone: str) -> bool:
        b = self._buckets.get(zone)
        if b is None or b[0] <= 0:
            return False
        now = self.clock.monotonic()
        tokens = self._refill(b, now)
        if tokens >= 1.0:
            self._buckets[zone] = (b[0], tokens - 1.0, now)
            return True
        self._buckets[zone] = (b[0], tokens, now)
        return False


def pods_to_evict(pods: Iterable[Mapping[str, Any]], node: Mapping[str, Any], tainted_at: Mapping[str, float],
                  now: float) -> tuple[list[Mapping[str, Any]], float | None]:
    """Taint manager: pods on `node` due for eviction now, and the next time to look again.

    `tainted_at` maps each NoExecute taint key to when we saw it added (our clock).
    """
    node_taints = [x for x in (node.get("spec") or {}).get("taints") or [] if x.get("effect") == "NoExecute"]
    if not node_taints:
        return [], None
    since = min((tainted_at.get(x.get("key"), now) for x in node_taints), default=now)
    due: list[Mapping[str, Any]] = []
    next_check: float | None = None
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        deadline = t.no_execute_deadline(node_taints, (pod.get("spec") or {}).get("tolerations") or [])
        if deadline is None:
            continue
        at = since + deadline
        if at <= now:
            due.append(pod)
        else:
            next_check = at if next_check is None else min(next_check, at)
    return due, next_check


def not_ready_pod_status(pod: Mapping[str, Any], now_iso: str) -> dict | None:
    """MarkPodsNotReady: the pod's status with Ready False, or None when it is already so (or finished)."""
    status = dict(pod.get("status") or {})
    if status.get("phase") in ("Succeeded", "Failed") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    conds = [dict(c) for c in status.get("conditions") or []]
    changed = False
    for c in conds:
        if c.get("type") in ("Ready", "ContainersReady") and c.get("status") != "False":
            c.update(status="False", reason="NodeNotReady" if c["type"] == "Ready" else c.get("reason"),
                     lastTransitionTime=now_iso)
            if c["type"] == "Ready":
                c["message"] = "the node this pod runs on is not ready"
            changed = True
    if not changed:
        return None
    status["conditions"] = conds
    return status

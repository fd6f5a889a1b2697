"""The disruption controller's arithmetic (pkg/controller/disruption): a PodDisruptionBudget's status.

Pure functions over the PDB, its pods and a scale finder. `expectedPods` is the pod count for an
integer `minAvailable`, else the summed scale of the pods' controllers (a Deployment through its
ReplicaSet, a ReplicationController, a StatefulSet); `desiredHealthy` follows minAvailable or
maxUnavailable (percentages rounded up); `currentHealthy` counts Ready pods that are neither being
deleted nor recorded by the eviction subresource as about to be (`disruptedPods`, for two minutes).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nodeagent.api.selectors import from_label_selector
from nodeagent.api.times import parse_time
from nodeagent.controllers import podutil

DELETION_TIMEOUT = dt.timedelta(minutes=2)  # how long an eviction's entry in disruptedPods is trusted

# (controller uid, its scale) for a pod's controller, None if the pod has none; raises LookupError when
# the controller is named but cannot be found or scaled.
ScaleFinder = Callable[[Mapping[str, Any]], "tuple[str, int] | None"]


class SyncError(Exception):
    """The budget cannot be computed now; the controller fails safe (no disruption allowed)."""


@dataclasses.dataclass
class Computed:
    expected: int
    desired: int
    current: int
    disrupted: dict[str, str]
    unmanaged: list[str]
    recheck: dt.datetime | None  # when an entry of disruptedPods expires


def pods_for(pdb: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The namespace's pods the PDB's selector picks (a missing selector picks none)."""
    spec = pdb.get("spec") or {}
    if spec.get("selector") is None:
        return []
    sel = from_label_selector(spec["selector"])
    ns = (pdb.get("metadata") or {}).get("namespace")
    return [p for p in pods if (p.get("metadata") or {}).get("namespace") == ns
            and sel.matches((p.get("metadata") or {}).get("labels") or {})]


def scaled(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with roundUp (what the controller uses for both fields)."""
    if isinstance(value, int):
        return value
    s = str(value)
    if not s.endswith("%"):
        try:
            return int(s)
        except ValueError:
            raise SyncError(f'invalid value for IntOrString: invalid value "{s}"') from None
    try:
        return math.ceil(int(s[:-1]) * total / 100)
    except ValueError:
        raise SyncError("invalid value for IntOrString: invalid type: string is not a percentage") from None


def expected_scale(pods: Iterable[Mapping[str, Any]], find: ScaleFinder) -> tuple[int, list[str]]:
    """getExpectedScale: the summed scale of the distinct controllers, and the pods with none."""
    scales: dict[str, int] = {}
    unmanaged: list[str] = []
    for pod in pods:
        try:
            found = find(pod)
        except LookupError as e:
            raise SyncError(str(e)) from None
        if found is None:
            unmanaged.append(pod["metadata"]["name"])
            continue
        scales[found[0]] = found[1]
    return sum(scales.values()), unmanaged


def expected_and_desired(pdb: Mapping[str, Any], pods: list[Mapping[str, Any]],
                         find: ScaleFinder) -> tuple[int, int, list[str]]:
    """getExpectedPodCount: (expectedPods, desiredHealthy, unmanaged pods)."""
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        expected, unmanaged = expected_scale(pods, find)
        return expected, max(0, expected - scaled(spec["maxUnavailable"], expected)), unmanaged
    min_available = spec.get("minAvailable")
    if isinstance(min_available, int):
        return len(pods), min_available, []
    if min_available is not None:
        expected, unmanaged = expected_scale(pods, find)
        return expected, scaled(min_available, expected), unmanaged
    return 0, 0, []


def disrupted_map(pdb: Mapping[str, Any], pods: list[Mapping[str, Any]],
                  now: dt.datetime) -> tuple[dict[str, str], dt.datetime | None]:
    """buildDisruptedPodMap: entries for live pods not yet past DELETION_TIMEOUT, and the next expiry."""
    recorded = (pdb.get("status") or {}).get("disruptedPods") or {}
    by_name = {p["metadata"]["name"]: p for p in pods}
    out: dict[str, str] = {}
    recheck: dt.datetime | None = None
    for name, stamp in recorded.items():
        pod = by_name.get(name)
        if pod is None or podutil.is_terminating(pod):
            continue
        when = parse_time(stamp)
        if when is None:
            continue
        expires = when + DELETION_TIMEOUT
        if expires < now:
            continue  # the eviction did not delete the pod in time: count it again
        out[name] = stamp
        recheck = expires if recheck is None or expires < recheck else recheck
    return out, recheck


def count_healthy(pods: Iterable[Mapping[str, Any]], disrupted: Mapping[str, str], now: dt.datetime) -> int:
    """countHealthyPods: Ready pods neither deleting nor recently evicted."""
    n = 0
    for pod in pods:
        if podutil.is_terminating(pod):
            continue
        stamp = parse_time(disrupted.get(pod["metadata"]["name"]))
        if stamp is not None and stamp + DELETION_TIMEOUT > now:
            continue
        if podutil.is_pod_ready(pod):
            n += 1
    return n


def compute(pdb: Mapping[str, Any], all_pods: Iterable[Mapping[str, Any]], find: ScaleFinder,
            now: dt.datetime) -> Computed:
    """Everything trySync computes for one PDB (raises SyncError when it cannot)."""
    pods = pods_for(pdb, all_pods)
    expected, desired, unmanaged = expected_and_desired(pdb, pods, find)
    disrupted, recheck = disrupted_map(pdb, pods, now)
    return Computed(expected, desired, count_healthy(pods, disrupted, now), disrupted, unmanaged, recheck)


def new_status(pdb: Mapping[str, Any], c: Computed) -> dict[str, Any]:
    """updatePdbStatus's status: no disruption while nothing is expected (the first pods' race)."""
    allowed = c.current - c.desired
    if c.expected <= 0 or allowed <= 0:
        allowed = 0
    current = pdb.get("status") or {}
    out: dict[str, Any] = {"observedGeneration": (pdb.get("metadata") or {}).get("generation", 1)}
    if c.disrupted:
        out["disruptedPods"] = dict(c.disrupted)
    out.update({"disruptionsAllowed": allowed, "currentHealthy": c.current, "desiredHealthy": c.desired,
                "expectedPods": c.expected})
    out["conditions"] = [dict(x) for x in current.get("conditions") or []]
    return out


def failsafe_status(pdb: Mapping[str, Any], message: str) -> dict[str, Any]:
    """failSafe: on a sync error no disruption is allowed, and the condition says why."""
    out = {k: v for k, v in (pdb.get("status") or {}).items() if k != "conditions"}
    out["disruptionsAllowed"] = 0
    out["conditions"] = [dict(x) for x in (pdb.get("status") or {}).get("conditions") or []]
    return out

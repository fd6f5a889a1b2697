"""The ReplicaSet controller's decisions: which pods it owns, how many to create or delete, its status.

Pure functions; the reconcile loop applies them through the API. Creation is
capped per sync (burstReplicas 500) and done in slow-start batches by the loop;
deletion picks the least valuable pods first (podutil.pods_to_delete).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.api.objects import Obj, ObjT
from nodeagent.api.selectors import from_label_selector
from nodeagent.controllers import podutil

BURST_REPLICAS = 500


@dataclasses.dataclass
class Plan:
    adopt: list[Obj] = dataclasses.field(default_factory=list)
    release: list[Obj] = dataclasses.field(default_factory=list)
    create: int = 0
    delete: list[Obj] = dataclasses.field(default_factory=list)
    owned: list[Obj] = dataclasses.field(default_factory=list)  # active pods it keeps after the plan


def claim(rs: Mapping[str, Any], pods: Iterable[ObjT]) -> tuple[list[ObjT], list[ObjT], list[ObjT]]:
    """(owned incl. to-adopt, to adopt, to release) among the namespace's pods."""
    selector = from_label_selector((rs.get("spec") or {}).get("selector"))
    owned: list[ObjT] = []
    adopt: list[ObjT] = []
    release: list[ObjT] = []
    for pod in pods:
        verdict = podutil.claimable(pod, rs, selector)
        if verdict == "own":
            owned.append(pod)
        elif verdict == "adopt":
            owned.append(pod)
            adopt.append(pod)
        elif verdict == "release":
            release.append(pod)
    return owned, adopt, release


def plan(rs: Mapping[str, Any], pods: Iterable[Obj], burst: int = BURST_REPLICAS) -> Plan:
    """manageReplicas: the difference between desired and active owned pods, capped at `burst`."""
    owned, adopt, release = claim(rs, pods)
    active = [p for p in owned if podutil.is_pod_active(p)]
    want = int((rs.get("spec") or {}).get("replicas", 1))
    diff = len(active) - want
    out = Plan(adopt=adopt, release=release, owned=active)
    if podutil.is_terminating(rs):
        return out
    if diff < 0:
        out.create = min(-diff, burst)
    elif diff > 0:
        victims = podutil.pods_to_delete(active, min(diff, burst))
        ids = {id(v) for v in victims}
        out.delete = list(victims)
        out.owned = [p for p in active if id(p) not in ids]
    return out


def status(rs: Mapping[str, Any], owned_active: Iterable[Mapping[str, Any]], now: dt.datetime,
           failure: str | None = None) -> dict:
    """calculateStatus: counts over the active owned pods, plus the ReplicaFailure condition."""
    spec = rs.get("spec") or {}
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    min_ready = int(spec.get("minReadySeconds") or 0)
    pods = list(owned_active)
    fully_labeled = sum(1 for p in pods if all(
        ((p.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in template_labels.items()))
    ready = sum(1 for p in pods if podutil.is_pod_ready(p))
    available = sum(1 for p in pods if podutil.is_pod_available(p, min_ready, now))
    st: dict[str, Any] = {
        "replicas": len(pods),
        "fullyLabeledReplicas": fully_labeled,
        "readyReplicas": ready,
        "availableReplicas": available,
        "observedGeneration": (rs.get("metadata") or {}).get("generation", 1),
    }
    conds = [c for c in ((rs.get("status") or {}).get("conditions") or [])
             if c.get("type") != "ReplicaFailure"]
    if failure:
        conds.append({"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                      "message": failure, "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ")})
    if conds:
        st["conditions"] = conds
    return st

"""The Deployment controller's arithmetic: template hashes, revisions, rolling-update steps, status.

Pure functions mirroring pkg/controller/deployment (rolling.go, recreate.go,
sync.go, util/deployment_util.go). The reconcile loop reads ReplicaSets and
pods through informers, asks these functions what to change, and writes it.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodeagent.api.objects import ObjT

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
CHANGE_CAUSE = "kubernetes.io/change-cause"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
ROLLBACK_TO = "deprecated.deployment.rollback.to"
# Deployment annotations a ReplicaSet does not inherit (deployment_util.go annotationsToSkip).
ANNOTATIONS_TO_SKIP = frozenset({LAST_APPLIED, REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS,
                                 ROLLBACK_TO})
MAX_REV_HISTORY_CHARS = 2000  # the controller's --deployment-controller max revision-history length
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"


def _fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def safe_encode(s: str) -> str:
    """rand.SafeEncodeString: no vowels or look-alikes, so hashes never spell words."""
    return "".join(_ALPHANUMS[ord(c) % len(_ALPHANUMS)] for c in s)


def _normalized(template: Mapping[str, Any]) -> str:
    """The template as Go compares it: no hash label, and null/empty fields the same as absent."""
    def prune(v: Any) -> Any:
        if isinstance(v, dict):
            out = {k: prune(x) for k, x in v.items()}
            return {k: x for k, x in out.items() if x not in (None, {}, [])}
        if isinstance(v, list):
            return [prune(x) for x in v]
        return v

    t = copy.deepcopy(dict(template))
    ((t.get("metadata") or {}).get("labels") or {}).pop(HASH_LABEL, None)
    return json.dumps(prune(t), sort_keys=True, separators=(",", ":"))


def template_hash(template: Mapping[str, Any], collision_count: int | None = None) -> str:
    """The pod-template-hash label value (ComputeHash: fnv32a of the template and collisionCount)."""
    data = _normalized(template).encode()
    if collision_count:
        data += str(collision_count).encode()
    return safe_encode(str(_fnv32a(data)))


def templates_equal(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """EqualIgnoreHash: pod templates compared without the pod-template-hash label."""
    return _normalized(a) == _normalized(b)


def revision(obj: Mapping[str, Any]) -> int:
    try:
        return int(((obj.get("metadata") or {}).get("annotations") or {}).get(REVISION, 0))
    except ValueError:
        return 0


def _spec(obj: Mapping[str, Any]) -> dict:
    return obj.get("spec") or {}


def replicas(obj: Mapping[str, Any]) -> int:
    return int(_spec(obj).get("replicas", 1 if obj.get("kind") == "Deployment" else 0) or 0)


def _available(rs: Mapping[str, Any]) -> int:
    return int((rs.get("status") or {}).get("availableReplicas") or 0)


def scaled_value(value: int | str | None, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    s = str(value)
    if s.endswith("%"):
        pct = int(s[:-1])
        v = pct * total / 100
        return math.ceil(v) if round_up else math.floor(v)
    return int(s)


def fenceposts(deployment: Mapping[str, Any]) -> tuple[int, int]:
    """ResolveFenceposts: (maxSurge, maxUnavailable); both 0 would deadlock, so unavailable becomes 1."""
    ru = (_spec(deployment).get("strategy") or {}).get("rollingUpdate") or {}
    desired = replicas(deployment)
    surge = scaled_value(ru.get("maxSurge", "25%"), desired, True)
    unavailable = scaled_value(ru.get("maxUnavailable", "25%"), desired, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def find_new_rs(deployment: Mapping[str, Any], rss: Iterable[ObjT]) -> ObjT | None:
    """The oldest ReplicaSet whose template matches the Deployment's (FindNewReplicaSet)."""
    template = _spec(deployment).get("template") or {}
    matches = [rs for rs in rss if templates_equal(_spec(rs).get("template") or {}, template)]
    matches.sort(key=lambda rs: ((rs.get("metadata") or {}).get("creationTimestamp") or "",
                                 (rs.get("metadata") or {}).get("name")))
    return matches[0] if matches else None


def new_rs_replicas(deployment: Mapping[str, Any], all_rss: Iterable[Mapping[str, Any]],
                    new_rs: Mapping[str, Any] | None) -> int:
    """NewRSNewReplicas: how far the new ReplicaSet may grow this step."""
    desired = replicas(deployment)
    strategy = (_spec(deployment).get("strategy") or {}).get("type", "RollingUpdate")
    if strategy == "Recreate":
        return desired
    current_new = replicas(new_rs) if new_rs else 0
    surge, _ = fenceposts(deployment)
    current_total = sum(replicas(rs) for rs in all_rss)
    max_total = desired + surge
    if current_total >= max_total:
        return current_new
    step = min(max_total - current_total, desired - current_new)
    return current_new + max(step, 0)


def scale_down_old(deployment: Mapping[str, Any], new_rs: Mapping[str, Any] | None,
                   old_rss: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """reconcileOldReplicaSets: new replica counts for old ReplicaSets (name -> replicas).

    First drops old pods that are not available (they cost no availability), then
    scales down available ones as far as maxUnavailable allows, oldest first.
    """
    old_total = sum(replicas(rs) for rs in old_rss)
    if old_total == 0:
        return {}
    all_rss = [*old_rss, new_rs] if new_rs else list(old_rss)
    all_total = sum(replicas(rs) for rs in all_rss)
    _, max_unavailable = fenceposts(deployment)
    min_available = replicas(deployment) - max_unavailable
    new_unavailable = (replicas(new_rs) - _available(new_rs)) if new_rs else 0
    max_scaled_down = all_total - min_available - new_unavailable
    if max_scaled_down <= 0:
        return {}
    out: dict[str, int] = {}
    ordered = sorted(old_rss, key=lambda rs: ((rs.get("metadata") or {}).get("creationTimestamp") or "",
                                              (rs.get("metadata") or {}).get("name")))
    # cleanupUnhealthyReplicas
    cleaned = 0
    for rs in ordered:
        if cleaned >= max_scaled_down:
            break
        cur = replicas(rs)
        unhealthy = cur - _available(rs)
        if cur == 0 or unhealthy <= 0:
            continue
        down = min(max_scaled_down - cleaned, unhealthy)
        out[rs["metadata"]["name"]] = cur - down
        cleaned += down
    # scaleDownOldReplicaSetsForRollingUpdate
    available_total = sum(_available(rs) for rs in all_rss)
    if available_total <= min_available:
        return out
    total_down = available_total - min_available
    done = 0
    for rs in ordered:
        if done >= total_down:
            break
        cur = out.get(rs["metadata"]["name"], replicas(rs))
        if cur == 0:
            continue
        down = min(cur, total_down - done)
        out[rs["metadata"]["name"]] = cur - down
        done += down
    return out


def next_revision(old_rss: Iterable[Mapping[str, Any]]) -> int:
    """MaxRevision of the old ReplicaSets, plus one: the revision the current template's ReplicaSet gets."""
    return max((revision(rs) for rs in old_rss), default=0) + 1


def set_new_rs_annotations(deployment: Mapping[str, Any], annotations: dict[str, str], new_revision: int,
                           exists: bool) -> bool:
    """SetNewReplicaSetAnnotations on `annotations` (changed in place); True if anything changed.

    The Deployment's own annotations are copied (but not its revision bookkeeping or kubectl's
    last-applied), the revision only ever grows, and a ReplicaSet brought back by a rollback keeps the
    revisions it had before in `revision-history` (bounded to 2000 characters, oldest dropped first).
    """
    changed = False
    for k, v in ((deployment.get("metadata") or {}).get("annotations") or {}).items():
        if k in ANNOTATIONS_TO_SKIP or annotations.get(k) == v:
            continue
        annotations[k] = v
        changed = True
    old = annotations.get(REVISION)
    try:
        old_int = int(old) if old is not None and old != "" else 0
    except ValueError:
        return False  # a revision that is not a number is left alone, as the controller leaves it
    if old_int < new_revision:
        annotations[REVISION] = str(new_revision)
        changed = True
        if old is not None:
            _append_history(annotations, old)
    if not exists:
        surge, _ = fenceposts(deployment)
        for k, v in ((DESIRED_REPLICAS, str(replicas(deployment))),
                     (MAX_REPLICAS, str(replicas(deployment) + surge))):
            if annotations.get(k) != v:
                annotations[k] = v
                changed = True
    return changed


def _append_history(annotations: dict[str, str], old_revision: str) -> None:
    history = annotations.get(REVISION_HISTORY, "")
    if not history:
        annotations[REVISION_HISTORY] = old_revision
        return
    parts = history.split(",")
    total, start = len(history) + len(old_revision) + 1, 0
    while total > MAX_REV_HISTORY_CHARS and start < len(parts):
        total -= len(parts[start]) + 1
        start += 1
    if total <= MAX_REV_HISTORY_CHARS:
        annotations[REVISION_HISTORY] = ",".join([*parts[start:], old_revision])


def new_rs_object(deployment: Mapping[str, Any], old_rss: Iterable[Mapping[str, Any]], count: int,
                  collision_count: int | None = None) -> dict:
    """The ReplicaSet a Deployment creates for its current template (getNewReplicaSet)."""
    meta = deployment["metadata"]
    spec = _spec(deployment)
    template = copy.deepcopy(spec.get("template") or {})
    h = template_hash(template, collision_count)
    tmeta = template.setdefault("metadata", {})
    tmeta.setdefault("labels", {})[HASH_LABEL] = h
    selector = copy.deepcopy(spec.get("selector") or {})
    selector.setdefault("matchLabels", {})[HASH_LABEL] = h
    annotations: dict[str, str] = {}
    set_new_rs_annotations(deployment, annotations, next_revision(old_rss), exists=False)
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta['name']}-{h}",
            "namespace": meta.get("namespace", "default"),
            "labels": dict(tmeta["labels"]),
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                                 "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "replicas": count,
            "minReadySeconds": spec.get("minReadySeconds", 0),
            "selector": selector,
            "template": template,
        },
    }


def history_to_delete(deployment: Mapping[str, Any], old_rss: Iterable[ObjT]) -> list[ObjT]:
    """cleanupDeployment: old, empty ReplicaSets beyond revisionHistoryLimit (default 10), oldest first."""
    limit = _spec(deployment).get("revisionHistoryLimit", 10)
    empty = [rs for rs in old_rss if replicas(rs) == 0 and not (rs.get("status") or {}).get("replicas")
             and not (rs.get("metadata") or {}).get("deletionTimestamp")]
    extra = len(empty) - int(limit)
    if extra <= 0:
        return []
    empty.sort(key=lambda rs: (revision(rs), (rs.get("metadata") or {}).get("creationTimestamp") or ""))
    return empty[:extra]


def status(deployment: Mapping[str, Any], new_rs: Mapping[str, Any] | None,
           all_rss: Iterable[Mapping[str, Any]]) -> dict:
    """calculateStatus: replica counts summed over the ReplicaSets."""
    all_rss = list(all_rss)

    def total(field: str) -> int:
        return sum(int((rs.get("status") or {}).get(field) or 0) for rs in all_rss)

    desired = replicas(deployment)
    available = total("availableReplicas")
    st = {
        "observedGeneration": (deployment.get("metadata") or {}).get("generation", 1),
        "replicas": total("replicas"),
        "updatedReplicas": int((new_rs or {}).get("status", {}).get("replicas") or 0) if new_rs else 0,
        "readyReplicas": total("readyReplicas"),
        "availableReplicas": available,
        "unavailableReplicas": max(desired - available, 0),
    }
    return st


def is_complete(deployment: Mapping[str, Any], st: Mapping[str, Any]) -> bool:
    """DeploymentComplete: every replica updated and available, none of the old left."""
    desired = replicas(deployment)
    return (st.get("updatedReplicas") == desired and st.get("replicas") == desired
            and st.get("availableReplicas") == desired
            and st.get("observedGeneration", 0) >= (deployment.get("metadata") or {}).get("generation", 1))

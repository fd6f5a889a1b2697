"""What the workload controllers share: owner references, pod readiness, ranking, templates.

Pure functions over Kubernetes JSON objects, mirroring pkg/controller's
controller_utils: which pods a controller owns, which are active, which to
delete first when scaling down, and how a pod is stamped out of a template.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from nodeagent.api.objects import ObjT
from nodeagent.api.selectors import Selector
from nodeagent.api.times import parse_time

POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def controller_ref(obj: Mapping[str, Any]) -> dict | None:
    """The ownerReference with controller=true, if any (an object has at most one)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def owner_reference(owner: Mapping[str, Any], block_owner_deletion: bool = True) -> dict:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": block_owner_deletion,
    }


def adopt_patch(owner: Mapping[str, Any], obj: Mapping[str, Any]) -> dict:
    """kube's ownerRefControllerPatch, sent as a strategic merge patch: the owner's reference merged by
    uid, with the dependent's uid as the precondition and no resourceVersion, so the apiserver applies it
    to whatever the object is now (a status write in between does not make the adoption fail)."""
    return {"metadata": {"ownerReferences": [owner_reference(owner)], "uid": obj["metadata"]["uid"]}}


def release_patch(owner_uid: str, obj: Mapping[str, Any]) -> dict:
    """kube's GenerateDeleteOwnerRefStrategicMergeBytes: the owner's reference removed, the rest kept."""
    return {"metadata": {"ownerReferences": [{"$patch": "delete", "uid": owner_uid}],
                         "uid": obj["metadata"]["uid"]}}


def is_controlled_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    ref = controller_ref(obj)
    return bool(ref and ref.get("uid") == owner["metadata"].get("uid"))


def is_terminating(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def is_pod_active(pod: Mapping[str, Any]) -> bool:
    """Not finished and not being deleted (controller.IsPodActive)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not is_terminating(pod)


def pod_condition(pod: Mapping[str, Any], ctype: str) -> dict | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def is_pod_ready(pod: Mapping[str, Any]) -> bool:
    c = pod_condition(pod, "Ready")
    return bool(c and c.get("status") == "True")


def is_pod_available(pod: Mapping[str, Any], min_ready_seconds: int, now: dt.datetime) -> bool:
    """Ready for at least minReadySeconds (podutil.IsPodAvailable)."""
    if not is_pod_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = parse_time((pod_condition(pod, "Ready") or {}).get("lastTransitionTime"))
    return since is not None and (now - since).total_seconds() >= min_ready_seconds


def _restarts(pod: Mapping[str, Any]) -> int:
    return max((cs.get("restartCount", 0) for cs in (pod.get("status") or {}).get("containerStatuses") or []),
               default=0)


def _deletion_cost(pod: Mapping[str, Any]) -> int:
    try:
        return int(((pod.get("metadata") or {}).get("annotations") or {}).get(POD_DELETION_COST, 0))
    except ValueError:
        return 0


def deletion_rank_key(pod: Mapping[str, Any], colocated: Mapping[str, int] | None = None) -> tuple:
    """Sort key: pods that sort first are deleted first (ActivePodsWithRanks.Less).

    Unassigned before assigned; Pending < Unknown < Running; not ready before ready;
    more replicas on the same node first; lower pod-deletion-cost first; more recently
    ready first; more restarts first; newer first.
    """
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName") or ""
    ready = is_pod_ready(pod)
    ready_since = parse_time((pod_condition(pod, "Ready") or {}).get("lastTransitionTime")) if ready else None
    created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    return (
        1 if node else 0,
        _PHASE_RANK.get(status.get("phase", ""), 0),
        1 if ready else 0,
        -(colocated or {}).get(node, 0) if node else 0,
        _deletion_cost(pod),
        -ready_since.timestamp() if ready_since else float("-inf"),  # no time, then most recent first
        -_restarts(pod),
        -created.timestamp() if created else float("-inf"),  # no time, then newest first
    )


def pods_to_delete(pods: Iterable[ObjT], count: int) -> list[ObjT]:
    """The `count` least valuable pods (getPodsToDelete with node co-location ranks)."""
    candidates = list(pods)
    colocated: dict[str, int] = {}
    for p in candidates:
        node = (p.get("spec") or {}).get("nodeName")
        if node:
            colocated[node] = colocated.get(node, 0) + 1
    return sorted(candidates, key=lambda p: deletion_rank_key(p, colocated))[:count]


def pod_from_template(template: Mapping[str, Any], owner: Mapping[str, Any], namespace: str,
                      name_prefix: str, extra_labels: Mapping[str, str] | None = None) -> dict:
    """A new pod object for a controller (GetPodFromTemplate): generateName, labels, owner ref."""
    tmeta = template.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    labels.update(extra_labels or {})
    meta: dict[str, Any] = {
        "generateName": f"{name_prefix}-",
        "namespace": namespace,
        "labels": labels,
        "ownerReferences": [owner_reference(owner)],
    }
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    if tmeta.get("finalizers"):
        meta["finalizers"] = list(tmeta["finalizers"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": copy.deepcopy(template.get("spec") or {})}


def claimable(pod: Mapping[str, Any], owner: Mapping[str, Any], selector: Selector) -> str:
    """What a controller does with a pod (ClaimPods): "own", "adopt", "release" or "ignore"."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    ref = controller_ref(pod)
    if ref is not None:
        if ref.get("uid") != owner["metadata"].get("uid"):
            return "ignore"
        if selector.matches(labels):
            return "own"
        return "ignore" if is_terminating(owner) else "release"
    if is_terminating(owner) or is_terminating(pod) or not selector.matches(labels):
        return "ignore"
    return "adopt"


async def slow_start_batch(count: int, initial: int, fn: Callable[[], Awaitable[None]]) -> int:
    """Run `fn` `count` times in batches of 1, 2, 4, ...; stop at the first batch with a failure.

    Returns how many succeeded. A quota or admission error then costs one call, not hundreds.
    """
    import asyncio

    remaining, batch, done = count, min(count, initial), 0
    while batch > 0:
        results = await asyncio.gather(*(fn() for _ in range(batch)), return_exceptions=True)
        ok = sum(1 for r in results if not isinstance(r, BaseException))
        done += ok
        if ok < batch:
            return done
        remaining -= batch
        batch = min(2 * batch, remaining)
    return done

"""The pods/eviction subresource (kube-apiserver's EvictionREST): delete a pod only as its budget allows.

A terminal, pending or already-deleting pod is deleted outright. Otherwise the one PodDisruptionBudget
that selects the pod must allow a disruption in its status (written by the disruption controller):
the eviction decrements `disruptionsAllowed` and records the pod in `disruptedPods` in the same status
write, so two evictions cannot spend one disruption; a budget that is exhausted, or whose status has not
caught up with its spec, answers 429 TooManyRequests with kube-apiserver's message and cause. An unready
pod is let go while the budget is met without it (or under `unhealthyPodEvictionPolicy: AlwaysAllow`).
The pod gets the `DisruptionTarget` condition before it is deleted.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nodeagent.api import pdb as pdbutil
from nodeagent.api.resources import Resource, builtin
from nodeagent.api.selectors import SelectorError, from_label_selector
from nodeagent.api.status import status_body
from nodeagent.api.times import now_rfc3339
from nodeagent.apiserver import errors
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.registry import Registry

PDBS = builtin("policy", "v1", "poddisruptionbudgets")
MAX_DISRUPTED_PODS = 2000
_RETRIES = 20
_EVICTION_VERSIONS = ("policy/v1", "policy/v1beta1")
_BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


def too_many_requests(message: str, retry_after: int, cause: str) -> ApiError:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return ApiError(429, "TooManyRequests", message, details)


def _stale(name: str) -> ApiError:
    return too_many_requests(_BUDGET_MESSAGE, 10,
                             f"The disruption budget {name} is still being processed by the server.")


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _can_ignore_pdb(pod: dict[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(pod["metadata"].get("deletionTimestamp"))


def _delete_options(body: Any, name: str, dry_run: bool) -> tuple[dict[str, Any], bool]:
    if not isinstance(body, dict) or body.get("kind") not in (None, "Eviction") \
            or body.get("apiVersion") not in (None, *_EVICTION_VERSIONS):
        what = body.get("kind") if isinstance(body, dict) else type(body).__name__
        raise errors.bad_request(f"not a Eviction object: {what}")
    if (body.get("metadata") or {}).get("name") != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    opts = dict(body.get("deleteOptions") or {})
    if opts.get("dryRun") and dry_run and opts["dryRun"] != ["All"]:
        raise errors.bad_request(f"Non-matching dry-run options in request and content: [All] and "
                                 f"{opts['dryRun']}")
    return opts, dry_run or opts.get("dryRun") == ["All"]


async def evict(registry: Registry, res: Resource, ns: str | None, name: str, body: Any,
                dry_run: bool) -> tuple[dict[str, Any], int]:
    """Evict; returns the Status to answer with and its HTTP code (kube-apiserver answers a pod with several
    budgets with a 500 Failure Status, not an error)."""
    opts, dry_run = _delete_options(body, name, dry_run)
    pinned = bool((opts.get("preconditions") or {}).get("resourceVersion"))
    pod = await registry.get(res, ns, name)
    if _can_ignore_pdb(pod):
        if not pinned and (pod.get("status") or {}).get("phase") == "Pending" \
                and not pod["metadata"].get("deletionTimestamp"):
            opts.setdefault("preconditions", {})["resourceVersion"] = pod["metadata"]["resourceVersion"]
        await registry.delete(res, ns, name, opts, dry_run)
        return status_body("Success", code=201), 201
    budgets = await _budgets(registry, pod)
    if len(budgets) > 1:
        msg = ("This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
               "support.")
        return status_body("Failure", message=msg, code=500), 500
    pin_pod = False
    if budgets:
        pdb = budgets[0]
        spec, st = pdb.get("spec") or {}, pdb.get("status") or {}
        if not _ready(pod) and (spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or (
                int(st.get("currentHealthy") or 0) >= int(st.get("desiredHealthy") or 0) > 0)):
            pin_pod = True  # let the unready pod go, unless it became ready meanwhile
        else:
            await _check_and_decrement(registry, pdb, name, dry_run)
    if pin_pod and not pinned:
        opts.setdefault("preconditions", {})["resourceVersion"] = pod["metadata"]["resourceVersion"]
    try:
        await _mark_and_delete(registry, res, ns, name, opts, dry_run)
    except ApiError as e:
        if e.code == 409 and pin_pod and not pinned:
            raise _stale(budgets[0]["metadata"]["name"]) from None
        raise
    return status_body("Success", code=201), 201


async def _budgets(registry: Registry, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The namespace's budgets whose (non-empty, valid) selector picks the pod."""
    items, _ = await registry.list(PDBS, pod["metadata"].get("namespace"))
    labels = pod["metadata"].get("labels") or {}
    out = []
    for pdb in items:
        sel = (pdb.get("spec") or {}).get("selector")
        if not sel or not (sel.get("matchLabels") or sel.get("matchExpressions")):
            continue  # a nil or empty selector matches nothing here
        try:
            if from_label_selector(sel).matches(labels):
                out.append(pdb)
        except SelectorError:
            continue
    return out


async def _check_and_decrement(registry: Registry, pdb: dict[str, Any], pod_name: str, dry_run: bool) -> None:
    """checkAndDecrement, retried with a fresh read when another eviction wrote the budget first."""
    ns, name = pdb["metadata"].get("namespace"), pdb["metadata"]["name"]
    for attempt in range(_RETRIES):
        st = dict(pdb.get("status") or {})
        if int(st.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 0):
            raise _stale(name)
        allowed = int(st.get("disruptionsAllowed") or 0)
        if allowed < 0:
            raise errors.forbidden_reason("poddisruptionbudget", "policy", name,
                                          "pdb disruptions allowed is negative")
        if len(st.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
            raise errors.forbidden_reason("poddisruptionbudget", "policy", name,
                                          "DisruptedPods map too big - too many evictions not confirmed by "
                                          "PDB controller")
        if allowed == 0:
            raise too_many_requests(_BUDGET_MESSAGE, 0, f"The disruption budget {name} needs "
                                    f"{int(st.get('desiredHealthy') or 0)} healthy pods and has "
                                    f"{int(st.get('currentHealthy') or 0)} currently")
        st["disruptionsAllowed"] = allowed - 1
        if st["disruptionsAllowed"] == 0:
            st["conditions"] = [dict(c) for c in st.get("conditions") or []]
            pdbutil.update_disruption_allowed_condition(st, now_rfc3339())
        if dry_run:
            return
        st["disruptedPods"] = {**(st.get("disruptedPods") or {}), pod_name: now_rfc3339()}
        try:
            await registry.update(PDBS, ns, name, {**pdb, "status": st}, "status")
            return
        except ApiError as e:
            if e.code != 409 or e.reason != "Conflict":
                raise
        await asyncio.sleep(0.05 * (attempt + 1))
        pdb = await registry.get(PDBS, ns, name)
    raise errors.timeout(f'couldn\'t update PodDisruptionBudget "{name}" due to conflicts', 10)


async def _mark_and_delete(registry: Registry, res: Resource, ns: str | None, name: str,
                           opts: dict[str, Any], dry_run: bool) -> None:
    """addConditionAndDeletePod: the DisruptionTarget condition on the live pod, then the delete."""
    pre = opts.get("preconditions") or {}
    if not dry_run:
        def mark(pod: dict[str, Any]) -> dict[str, Any]:
            meta = pod["metadata"]
            if pre.get("uid") and pre["uid"] != meta.get("uid"):
                raise errors.conflict(res.name, name, "", f"Precondition failed: UID in precondition: "
                                      f"{pre['uid']}, UID in object meta: {meta.get('uid')}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
                raise errors.conflict(res.name, name, "", "Precondition failed: ResourceVersion in "
                                      f"precondition: {pre['resourceVersion']}, ResourceVersion in object "
                                      f"meta: {meta.get('resourceVersion')}")
            _set_disruption_target(pod)
            return pod

        updated, _ = await registry.patch_with_retry(res, ns, name, "status", mark)
        if pre.get("resourceVersion"):
            opts = {**opts, "preconditions": {**pre, "resourceVersion":
                                              updated["metadata"]["resourceVersion"]}}
    await registry.delete(res, ns, name, opts, dry_run)


def _set_disruption_target(pod: dict[str, Any]) -> None:
    """podutil.UpdatePodCondition with DisruptionTarget=True (EvictionByEvictionAPI)."""
    want = {"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
            "lastTransitionTime": now_rfc3339(), "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting"}
    conds = (pod.setdefault("status", {})).setdefault("conditions", [])
    for i, c in enumerate(conds):
        if c.get("type") == want["type"]:
            if c.get("status") == want["status"]:
                want["lastTransitionTime"] = c.get("lastTransitionTime")
            conds[i] = want
            return
    conds.append(want)

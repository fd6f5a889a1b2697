"""The bootstrap policy reconciled at start, as kube-apiserver's rbac/bootstrap-roles post-start hook:
missing objects created; existing ones annotated `rbac.authorization.kubernetes.io/autoupdate: "true"`
(or without that annotation) get the rules, subjects, labels and aggregation selectors they lack, nothing
taken away; `autoupdate: "false"` leaves an object as its owner set it."""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

from nodeagent.api.resources import builtin
from nodeagent.apiserver.authz import policy
from nodeagent.apiserver.authz.rules import uncovered
from nodeagent.apiserver.errors import ApiError
from nodeagent.store import base as store_base

log = logging.getLogger("nodeagent.apiserver.authz")
_RES = {
    k: builtin("rbac.authorization.k8s.io", "v1", v)
    for k, v in (
        ("ClusterRole", "clusterroles"),
        ("ClusterRoleBinding", "clusterrolebindings"),
        ("Role", "roles"),
        ("RoleBinding", "rolebindings"),
    )
}
_CONCURRENT_WRITES = 16  # bootstrap objects written at once


def reconciled(existing: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any] | None:
    """`existing` with what `expected` adds, or None when nothing is missing (or autoupdate is off)."""
    meta = existing.get("metadata") or {}
    if (meta.get("annotations") or {}).get(policy.AUTOUPDATE) == "false":
        return None
    out = copy.deepcopy(existing)
    om = out.setdefault("metadata", {})
    em = expected["metadata"]
    for field in ("labels", "annotations"):
        want = em.get(field) or {}
        have = om.get(field) or {}
        if any(have.get(k) != v for k, v in want.items()):
            om[field] = {**have, **want}
    if "aggregationRule" in expected:
        sel = list((out.get("aggregationRule") or {}).get("clusterRoleSelectors") or [])
        for s in expected["aggregationRule"]["clusterRoleSelectors"]:
            if s not in sel:
                sel.append(s)
        out["aggregationRule"] = {"clusterRoleSelectors": sel}
    elif "rules" in expected:
        have_rules = list(out.get("rules") or [])
        missing = uncovered(have_rules, expected["rules"])
        if missing:
            out["rules"] = have_rules + [r for r in expected["rules"] if uncovered(have_rules, [r])]
    if "subjects" in expected:
        subs = list(out.get("subjects") or [])
        for s in expected["subjects"]:
            if s not in subs:
                subs.append(s)
        out["subjects"] = subs
    return None if out == existing else out


async def ensure(registry: Any) -> None:
    """Create or complete every object of the bootstrap policy. The objects are independent, so they are
    written a batch at a time: on etcd each write waits for a commit, and a hundred of them one after the
    other kept a fresh server from answering for half a minute on a busy host."""
    objs = (
        policy.cluster_roles()
        + policy.controller_roles()
        + policy.cluster_role_bindings()
        + policy.controller_role_bindings()
        + policy.kubeadm_objects()
        + policy.addon_objects()
    )
    gate = asyncio.Semaphore(_CONCURRENT_WRITES)

    async def one(want: dict[str, Any]) -> None:
        async with gate:
            await _ensure_one(registry, want)

    async with asyncio.TaskGroup() as tg:
        for want in objs:
            tg.create_task(one(want))


async def _ensure_one(registry: Any, want: dict[str, Any]) -> None:
    res = _RES[want["kind"]]
    ns = want["metadata"].get("namespace")
    name = want["metadata"]["name"]
    try:
        try:
            have = await registry.store.get(res.key(ns, name))
        except store_base.NotFound:
            await registry.create(res, ns, copy.deepcopy(want))
            return
        if want["kind"].endswith("Binding") and have.get("roleRef") != want.get("roleRef"):
            log.warning(
                "%s %s refers to %s, not %s: left as it is",
                want["kind"],
                name,
                have.get("roleRef"),
                want["roleRef"],
            )
            return
        new = reconciled(have, want)
        if new is not None:
            await registry.update(res, ns, name, new)
            log.info("reconciled %s %s with the bootstrap policy", want["kind"], name)
    except ApiError as e:
        if e.code not in (409,):
            log.warning("bootstrap policy: %s %s: %s", want["kind"], name, e.message)

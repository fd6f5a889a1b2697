"""Object lifecycles beyond plain CRUD: namespace termination (the namespace controller's part) and
CustomResourceDefinitions (establishing them, deleting their objects with them).

The registry calls these with its store, and with its own `delete` where a namespace's objects go
through the full delete semantics (graceful pods, finalizers)."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nodeagent.api import validation
from nodeagent.api.resources import Resource, builtin, stored_resources
from nodeagent.api.times import now_rfc3339
from nodeagent.apiserver import errors
from nodeagent.apiserver.errors import ApiError
from nodeagent.store import base as store_base

log = logging.getLogger("nodeagent.apiserver")
NAMESPACES = builtin("", "v1", "namespaces")
PODS = builtin("", "v1", "pods")

# Registry.delete(res, namespace, name, options)
Delete = Callable[[Resource, str | None, str, dict[str, Any]], Awaitable[Any]]


def establish_crd(crd: dict[str, Any]) -> None:
    """Check a CustomResourceDefinition's names and mark it Established (served at once)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    errs = []
    for f in ("plural", "kind"):
        if not names.get(f):
            errs.append(validation.required(f"spec.names.{f}"))
    if not spec.get("group"):
        errs.append(validation.required("spec.group"))
    if not spec.get("versions"):
        errs.append(validation.required("spec.versions"))
    want = f"{names.get('plural')}.{spec.get('group')}"
    if not errs and crd["metadata"].get("name") != want:
        errs.append(validation.invalid("metadata.name", crd["metadata"].get("name"),
                                       "must be spec.names.plural+\".\"+spec.group"))
    if errs:
        raise errors.invalid("CustomResourceDefinition", crd["metadata"].get("name", ""), errs,
                             "apiextensions.k8s.io")
    now = now_rfc3339()
    accepted = {"plural": names["plural"], "kind": names["kind"],
                "singular": names.get("singular") or names["kind"].lower(),
                "listKind": names.get("listKind") or names["kind"] + "List"}
    for k in ("shortNames", "categories"):
        if names.get(k):
            accepted[k] = names[k]
    crd["status"] = {"acceptedNames": accepted,
                     "storedVersions": [v["name"] for v in spec["versions"] if v.get("storage")] or
                     [spec["versions"][0].get("name")],
                     "conditions": [{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                                     "message": "no conflicts found", "lastTransitionTime": now},
                                    {"type": "Established", "status": "True",
                                     "reason": "InitialNamesAccepted",
                                     "message": "the initial names have been accepted",
                                     "lastTransitionTime": now}]}

async def delete_custom_objects(store: store_base.Store, crd: dict[str, Any]) -> None:
    """Deleting a CustomResourceDefinition deletes every object of its kind first (as Kubernetes does)."""
    spec = crd.get("spec") or {}
    plural = (spec.get("names") or {}).get("plural")
    if not plural or not spec.get("group"):
        return
    prefix = f"/registry/{spec['group']}/{plural}/"
    items, _ = await store.list(prefix)
    r = Resource(spec["group"], "v1", plural, "", spec.get("scope", "Namespaced") == "Namespaced")
    for o in items:
        try:
            await store.delete(r.key(o["metadata"].get("namespace"), o["metadata"]["name"]))
        except store_base.NotFound:
            pass

async def delete_namespace(store: store_base.Store, current: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Mark the namespace Terminating: (the namespace, whether it just started terminating; the caller then
    runs `finish_namespace`)."""
    name = current["metadata"]["name"]
    if name in ("default", "kube-system", "kube-public"):
        raise ApiError(403, "Forbidden",
                       f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                       {"name": name, "kind": "namespaces"})
    if current["metadata"].get("deletionTimestamp"):
        return current, False
    new = copy.deepcopy(current)
    new["metadata"]["deletionTimestamp"] = now_rfc3339()
    new["metadata"]["deletionGracePeriodSeconds"] = 0
    new.setdefault("status", {})["phase"] = "Terminating"
    return await store.update(NAMESPACES.key(None, name), new), True

async def finish_namespace(store: store_base.Store, delete: Delete, name: str) -> None:
    """The namespace lifecycle controller's job: delete everything inside, then the namespace."""

    try:
        for _ in range(600):
            left = 0
            for r in stored_resources():
                if not r.namespaced:
                    continue
                items, _ = await store.list(r.key_prefix(name))
                for o in items:
                    left += 1
                    try:
                        await delete(r, name, o["metadata"]["name"], {"gracePeriodSeconds": 0
                                                                      if r is not PODS else None})
                    except ApiError:
                        pass
            if not left:
                break
            await asyncio.sleep(1)
        await store.delete(NAMESPACES.key(None, name))
    except store_base.NotFound:
        pass
    except Exception:
        log.exception("finishing namespace %s", name)


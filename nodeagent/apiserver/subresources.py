"""Subresources: status, scale, binding, eviction, namespace finalize; log/exec/attach/portforward go to the
kubelet."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from nodeagent.api import patch as patches
from nodeagent.api.resources import Resource, builtin
from nodeagent.api.selectors import SelectorError, label_selector_string
from nodeagent.api.status import status_body
from nodeagent.api.times import now_rfc3339
from nodeagent.apiserver import errors, eviction, patching
from nodeagent.apiserver.codec import json_response
from nodeagent.apiserver.incoming import ApiRequest, over_http
from nodeagent.apiserver.registry import Registry
from nodeagent.apiserver.request import RequestInfo
from nodeagent.store import base as store_base

NODES = builtin("", "v1", "nodes")
CRDS = builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions")
_STREAMING = {"log", "exec", "attach", "portforward", "proxy"}

# Forwards log/exec/attach/portforward/proxy to the node's kubelet (proxy.KubeletProxy).
KubeletProxy = Callable[[Registry, web.BaseRequest, RequestInfo], Awaitable[web.StreamResponse]]


async def handle(registry: Registry, kubelet_proxy: KubeletProxy | None, request: ApiRequest,
                 info: RequestInfo, body: Any, dry_run: bool) -> web.StreamResponse:
    sub, verb, res = info.subresource, info.verb, info.resource
    ns, name = info.namespace, info.name or ""
    if sub in _STREAMING:
        return await _kubelet(registry, kubelet_proxy, request, info)
    if sub in ("status", "ephemeralcontainers", "approval"):
        # What the write may change: ephemeral containers only, or the status.
        kind = "ephemeralcontainers" if sub == "ephemeralcontainers" else "status"
        if verb == "get":
            return json_response(await registry.get(res, ns, name))
        if verb == "update":
            obj, _ = await registry.update(res, ns, name, body, kind, dry_run)
            return json_response(obj)
        if verb == "patch":
            obj, _ = await patching.patch(registry, request.query, info, body, dry_run, kind)
            return json_response(obj)
    if sub == "finalize" and verb == "update":
        obj, _ = await registry.update(res, ns, name, body, "", dry_run)
        return json_response(obj)
    if sub == "scale":
        return await _scale(registry, request, info, body, dry_run)
    if sub == "binding" and verb == "create":
        return json_response(await _bind(registry, info, body, dry_run), 201)
    if sub == "eviction" and verb == "create":
        return json_response(*await eviction.evict(registry, res, ns, name, body, dry_run))
    raise errors.method_not_allowed()


def _success() -> dict[str, Any]:
    return status_body("Success", code=201)


# ------------------------------------------------------------------ scale
@dataclasses.dataclass(frozen=True)
class ScalePaths:
    """Where a resource keeps what its Scale shows: a CRD's scale subresource names them (JSON paths like
    `.spec.replicas`); built-in workloads use the defaults."""

    spec_replicas: str = ".spec.replicas"
    status_replicas: str = ".status.replicas"
    label_selector: str | None = None  # a CRD's labelSelectorPath (a string field); None: spec.selector


def _path(path: str) -> list[str]:
    return [p for p in path.lstrip(".").split(".") if p]


def _get_path(obj: dict[str, Any], path: str) -> Any:
    cur: Any = obj
    for p in _path(path):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(p)
    return cur


def _set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    parts = _path(path)
    cur = obj
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value


def to_scale(obj: dict[str, Any], paths: ScalePaths = ScalePaths()) -> dict[str, Any]:
    m = obj["metadata"]
    if paths.label_selector is not None:  # a CRD's: "" when it names no labelSelectorPath
        found = _get_path(obj, paths.label_selector) if paths.label_selector else ""
        sel_str = found if isinstance(found, str) else ""
    else:
        sel = (obj.get("spec") or {}).get("selector") or {}
        if obj.get("kind") == "ReplicationController":  # a plain map of labels
            sel = {"matchLabels": sel} if isinstance(sel, dict) else {}
        try:
            sel_str = label_selector_string(sel)
        except (SelectorError, AttributeError):
            sel_str = ""
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: m[k]
                         for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in m},
            "spec": {"replicas": _get_path(obj, paths.spec_replicas) or 0},
            "status": {"replicas": _get_path(obj, paths.status_replicas) or 0, "selector": sel_str}}


async def scale_paths(registry: Registry, res: Resource) -> ScalePaths:
    """A custom resource's scale paths from its CRD's version; built-in ones use the defaults."""
    if res.group in ("", "apps"):
        return ScalePaths()
    try:
        crd = await registry.store.get(CRDS.key(None, f"{res.name}.{res.group}"))
    except store_base.NotFound:
        return ScalePaths()
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("name") == res.version:
            sc = (v.get("subresources") or {}).get("scale") or {}
            return ScalePaths(sc.get("specReplicasPath", ".spec.replicas"),
                              sc.get("statusReplicasPath", ".status.replicas"),
                              sc.get("labelSelectorPath", ""))
    return ScalePaths()


async def _scale(registry: Registry, request: ApiRequest, info: RequestInfo, body: Any,
                 dry_run: bool) -> web.StreamResponse:
    res, ns, name = info.resource, info.namespace, info.name or ""
    paths = await scale_paths(registry, res)
    if info.verb == "get":
        return json_response(to_scale(await registry.get(res, ns, name), paths))
    ptype = info.patch_type

    def mutate(cur: dict[str, Any]) -> dict[str, Any]:
        scale = to_scale(cur, paths)
        if info.verb == "update":
            new = body if isinstance(body, dict) else {}
            rv = (new.get("metadata") or {}).get("resourceVersion")
            if rv and rv != cur["metadata"]["resourceVersion"]:
                raise errors.conflict(res.name, name, res.group)
        elif ptype == "application/json-patch+json":
            new = patches.json_patch(scale, body)
        elif ptype == "application/merge-patch+json":
            new = patches.merge_patch(scale, body)
        else:
            new = patches.strategic_merge(scale, body)
        replicas = (new.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise errors.invalid("Scale", name, [{"reason": "FieldValueInvalid", "field": "spec.replicas",
                                                 "message": f"Invalid value: {replicas}: must be "
                                                            "greater than or equal to 0"}], "autoscaling")
        _set_path(cur, paths.spec_replicas, replicas)
        return cur

    obj, _ = await registry.patch_with_retry(res, ns, name, "", mutate, dry_run)
    return json_response(to_scale(obj, paths))


# ------------------------------------------------------------------ binding
async def _bind(registry: Registry, info: RequestInfo, body: Any, dry_run: bool) -> dict[str, Any]:
    res, ns, name = info.resource, info.namespace, info.name or ""
    if not isinstance(body, dict) or not isinstance(body.get("target"), dict) \
            or not body["target"].get("name"):
        raise errors.invalid("Binding", name, [{"reason": "FieldValueRequired", "field": "target.name",
                                               "message": "Required value"}])
    node = body["target"]["name"]
    annotations = (body.get("metadata") or {}).get("annotations") or {}

    def bound(cur: dict[str, Any]) -> dict[str, Any]:
        """The pod bound: a new object that copies the dicts it changes (metadata, spec, status) and shares
        the rest with the stored `cur`, which it never changes (the store's objects are read-only)."""
        if cur["metadata"].get("deletionTimestamp"):
            raise errors.conflict(res.name, name, "", "pod is being deleted, cannot be assigned to a host")
        was = (cur.get("spec") or {}).get("nodeName")
        if was:
            raise errors.conflict(res.name, name, "", f"pod {name} is already assigned to node \"{was}\"")
        meta = dict(cur["metadata"])
        if annotations:
            meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        spec = dict(cur["spec"])
        spec["nodeName"] = node
        st = dict(cur.get("status") or {})
        conds = [c for c in st.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                      "lastTransitionTime": now_rfc3339()})
        st["conditions"] = conds
        return {**cur, "metadata": meta, "spec": spec, "status": st}

    # spec.nodeName is immutable through update; binding writes it directly (status and spec together).
    for _ in range(8):
        cur = await registry.get(res, ns, name, shared=True)  # the stored object: read, never changed
        rv = int(cur["metadata"]["resourceVersion"])
        new = bound(cur)
        if dry_run:
            return _success()
        try:
            await registry.store.update(res.key(ns, name), new, rv, owned=True)  # ours: nothing else holds it
            return _success()
        except store_base.Conflict:
            continue
        except store_base.NotFound:
            raise errors.not_found(res.name, name) from None
    raise errors.conflict(res.name, name)


# ------------------------------------------------------------------ kubelet-served subresources
async def _kubelet(registry: Registry, kubelet_proxy: KubeletProxy | None, request: ApiRequest,
                   info: RequestInfo) -> web.StreamResponse:
    if info.resource.name not in ("pods", "nodes"):
        raise errors.method_not_allowed()
    if kubelet_proxy is None:
        raise errors.service_unavailable("no kubelet API proxy is configured on this server")
    return await kubelet_proxy(registry, over_http(request), info)

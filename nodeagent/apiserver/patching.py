"""PATCH: JSON patch, JSON merge patch, strategic merge patch, and server-side apply (with field
ownership)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from nodeagent.api import patch as patches
from nodeagent.api.fieldset import apply_ownership
from nodeagent.api.times import now_rfc3339
from nodeagent.apiserver import errors
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.registry import Registry
from nodeagent.apiserver.request import RequestInfo


async def patch(registry: Registry, query: Mapping[str, str], info: RequestInfo, body: Any, dry_run: bool,
                subresource: str = "") -> tuple[dict[str, Any], bool]:
    """PATCH in any of the four formats, retried on concurrent writes; apply creates a missing object."""
    ptype = info.patch_type or "application/strategic-merge-patch+json"
    res = info.resource
    if ptype == "application/apply-patch+yaml":
        if not query.get("fieldManager"):
            raise errors.invalid("PatchOptions", "",
                                 [{"reason": "FieldValueRequired", "field": "fieldManager",
                                                       "message": "Required value: is required for "
                                                                  "apply patch"}],
                                 "meta.k8s.io")
        if not isinstance(body, dict):
            raise errors.bad_request("apply patch must be an object")
        applied = body

        manager = query["fieldManager"]

        def mutate(cur: dict[str, Any]) -> dict[str, Any]:
            out = patches.strategic_merge(cur, {k: v for k, v in applied.items() if k != "status"}
                                          if not subresource else applied)
            out.setdefault("metadata", {})["resourceVersion"] = cur["metadata"]["resourceVersion"]
            apply_ownership(out, applied, manager, res.api_version, now_rfc3339())
            return out

        def create() -> dict[str, Any]:
            obj = copy.deepcopy(applied)
            apply_ownership(obj, applied, manager, res.api_version, now_rfc3339())
            return obj

        return await registry.patch_with_retry(res, info.namespace, info.name or "", subresource, mutate,
                                                    dry_run, create_missing=create)

    def mutate2(cur: dict[str, Any]) -> dict[str, Any]:
        try:
            if ptype == "application/json-patch+json":
                return patches.json_patch(cur, body)
            if not isinstance(body, dict):
                raise errors.bad_request("patch body must be a JSON object")
            if ptype == "application/merge-patch+json":
                return patches.merge_patch(cur, body)
            return patches.strategic_merge(cur, body)
        except patches.PatchError as e:
            raise ApiError(422, "Invalid", str(e)) from None

    out = await registry.patch_with_retry(res, info.namespace, info.name or "", subresource, mutate2, dry_run)
    return out

"""Serving a resource in a version other than its stored one (autoscaling/v1 HorizontalPodAutoscalers).

kube-apiserver decodes a request in the version it names, converts it to the storage version, and
converts every answer (objects, lists, watch events, Tables) back. The verbs here do the same over the
registry (and the handlers' watch, through `out_event`), with the converters of `nodeagent.api` (one
pair per converted resource).
Server-side apply is refused for a converted version (its field ownership is kept in the stored version).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodeagent.api import hpa_conversion
from nodeagent.api import patch as patches
from nodeagent.api.resources import Resource, storage_resource
from nodeagent.apiserver import errors
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.registry import Registry
from nodeagent.apiserver.request import RequestInfo

Convert = Callable[[dict[str, Any]], dict[str, Any]]
# (group, version, resource) -> (stored -> served, served -> stored)
CONVERTERS: dict[tuple[str, str, str], tuple[Convert, Convert]] = {
    ("autoscaling", "v1", "horizontalpodautoscalers"): (hpa_conversion.to_v1, hpa_conversion.to_v2),
}


def converted(res: Resource) -> bool:
    """Served in a version other than its stored one (api.resources.STORAGE_VERSION says which)."""
    return storage_resource(res) is not res


class ConvertedVerbs:
    """The REST verbs of one served-but-not-stored version."""

    def __init__(self, registry: Registry, res: Resource) -> None:
        self.registry, self.res = registry, res
        self.storage = storage_resource(res)
        self._out, self._in = CONVERTERS[(res.group, res.version, res.name)]

    def out(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._out(obj)

    def out_event(self, typ: str, obj: dict[str, Any]) -> dict[str, Any]:
        """A watch event's object in the served version (a BOOKMARK only names it)."""
        if typ == "BOOKMARK":
            return {**obj, "apiVersion": self.res.api_version}
        return self._out(obj)

    def into(self, obj: Any) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the body of a {self.res.kind} must be a JSON object")
        av, kind = obj.get("apiVersion"), obj.get("kind")
        if (av and av != self.res.api_version) or (kind and kind != self.res.kind):
            raise errors.bad_request(f"the API version in the data ({av}) does not match the expected API "
                                     f"version ({self.res.api_version})")
        try:
            return self._in(obj)
        except ValueError as e:
            raise errors.bad_request(f"cannot convert {self.res.kind} from {self.res.api_version}: {e}") \
                from None

    async def get(self, ns: str | None, name: str) -> dict[str, Any]:
        return self.out(await self.registry.get(self.storage, ns, name))

    async def create(self, ns: str | None, body: Any, dry_run: bool) -> dict[str, Any]:
        return self.out(await self.registry.create(self.storage, ns, self.into(body), dry_run, owned=True))

    async def update(self, ns: str | None, name: str, body: Any, sub: str,
                     dry_run: bool) -> tuple[dict[str, Any], bool]:
        obj, created = await self.registry.update(self.storage, ns, name, self.into(body), sub, dry_run)
        return self.out(obj), created

    async def patch(self, info: RequestInfo, body: Any, sub: str, dry_run: bool) -> dict[str, Any]:
        ptype = info.patch_type or "application/strategic-merge-patch+json"
        if ptype == "application/apply-patch+yaml":
            raise ApiError(415, "UnsupportedMediaType",
                           f"server-side apply is served for {self.res.kind} in {self.storage.api_version}, "
                           f"not {self.res.api_version}: apply the object as {self.storage.api_version}")

        def mutate(cur: dict[str, Any]) -> dict[str, Any]:
            view = self.out(cur)
            if ptype == "application/json-patch+json":
                new = patches.json_patch(view, body)
            elif not isinstance(body, dict):
                raise errors.bad_request("patch body must be a JSON object")
            elif ptype == "application/merge-patch+json":
                new = patches.merge_patch(view, body)
            else:
                new = patches.strategic_merge(view, body)
            stored = self.into(new)
            stored["metadata"]["resourceVersion"] = (new.get("metadata") or {}).get(
                "resourceVersion") or cur["metadata"]["resourceVersion"]
            return stored

        obj, _ = await self.registry.patch_with_retry(self.storage, info.namespace, info.name or "", sub,
                                                      mutate, dry_run)
        return self.out(obj)

"""The Endpoints and EndpointSlice controllers' loop: a Service's selector + pods → its endpoints objects.

Decisions are the pure functions in endpoints.py; this loop keys on Services,
re-syncs a Service when a pod it selects (before or after a change) changes,
and writes only what differs. Selector-less Services (like `kubernetes`) are
left to whoever manages their endpoints.
"""

from __future__ import annotations

from typing import Any

from nodeagent.client.informer import SharedInformers, key_of
from nodeagent.client.rest import ClientError
from nodeagent.controllers import endpoints as ep
from nodeagent.controllers.base import Controller, split_key

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
SKIP_MIRROR_LABEL = "endpointslice.kubernetes.io/skip-mirror"


class EndpointsController(Controller):
    name = "endpoints"
    service_account = "endpoint-controller"
    workers = 2

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.services = informers.get("services")
        self.pods = informers.get("pods")
        self.endpoints = informers.get("endpoints")
        self.slices = informers.get("endpointslices")
        self.services.add_handler(self.enqueue, lambda old, new: self.enqueue(new), self.enqueue)
        self.pods.add_handler(self._pod_changed, lambda old, new: self._pod_changed(old, new),
                              self._pod_changed)

    def _pod_changed(self, *pods: dict) -> None:
        for svc in self.services.list():
            if svc["metadata"].get("namespace") != pods[-1]["metadata"].get("namespace"):
                continue
            if any(ep.selects(svc, p) for p in pods):
                self.enqueue(svc)

    async def reconcile(self, key: str) -> None:
        ns, name = split_key(key)
        svc = self.services.get(name, ns)
        if svc is None:
            await self._delete_endpoints(ns, name)
            for s in self._slices_of(ns, name):
                await self._delete("endpointslices", s)
            return
        pods = [p for p in self.pods.list() if p["metadata"].get("namespace") == ns]
        want = ep.compute_endpoints(svc, pods)
        if want is not None:
            await self._sync_endpoints(ns, name, want)
        slices = ep.compute_endpoint_slices(svc, pods)
        if slices is not None:
            await self._sync_slices(ns, name, slices)

    async def _sync_endpoints(self, ns: str | None, name: str, want: dict[str, Any]) -> None:
        have = self.endpoints.get(name, ns)
        if have is None:
            try:
                await self.client.create("endpoints", want, ns)
                return
            except ClientError as e:
                if not e.already_exists:
                    raise
            # Our cache has not seen an object we created moments ago: update the live one instead.
            have = await self.client.get("endpoints", name, ns)
        if have.get("subsets", []) == want["subsets"] and \
                (have["metadata"].get("labels") or {}) == (want["metadata"].get("labels") or {}):
            return
        new = {**have, "subsets": want["subsets"],
               "metadata": {**have["metadata"], "labels": want["metadata"].get("labels") or {}}}
        await self.client.update("endpoints", new, ns)

    def _slices_of(self, ns: str | None, name: str) -> list[dict]:
        return [s for s in self.slices.list()
                if s["metadata"].get("namespace") == ns
                and (s["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL) == name
                and (s["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL) == ep.MANAGED_BY]

    async def _sync_slices(self, ns: str | None, name: str, want: list[dict]) -> None:
        have = {s["metadata"]["name"]: s for s in self._slices_of(ns, name)}
        for s in want:
            cur = have.pop(s["metadata"]["name"], None)
            if cur is None:
                try:
                    await self.client.create("endpointslices", s, ns)
                    continue
                except ClientError as e:
                    if not e.already_exists:
                        raise
                # Created moments ago but not yet in our cache: compare against the live one.
                cur = await self.client.get("endpointslices", s["metadata"]["name"], ns)
            if any(cur.get(k) != s.get(k) for k in ("endpoints", "ports", "addressType")) or \
                    (cur["metadata"].get("labels") or {}) != s["metadata"]["labels"]:
                new = {**s, "metadata": {**cur["metadata"], "labels": s["metadata"]["labels"],
                                         "ownerReferences": s["metadata"]["ownerReferences"]}}
                await self.client.update("endpointslices", new, ns)
        for stale in have.values():
            await self._delete("endpointslices", stale)

    async def _delete_endpoints(self, ns: str | None, name: str) -> None:
        have = self.endpoints.get(name, ns)
        if have is not None and not (have["metadata"].get("labels") or {}).get(SKIP_MIRROR_LABEL):
            await self._delete("endpoints", have)

    async def _delete(self, resource: str, obj: dict) -> None:
        try:
            await self.client.delete(resource, obj["metadata"]["name"], obj["metadata"].get("namespace"))
        except ClientError as e:
            if not e.not_found:
                raise
        self.log.debug("deleted %s %s", resource, key_of(obj))

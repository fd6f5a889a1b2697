"""The ResourceQuota loop: status.hard mirrors spec.hard and status.used is recounted from the namespace."""

from __future__ import annotations

import asyncio
import copy

from nodeagent.client.rest import ClientError
from nodeagent.controllers import quota
from nodeagent.controllers.base import Controller, SharedInformers

RESYNC = 15.0


class ResourceQuotaController(Controller):
    name = "resourcequota"
    service_account = "resourcequota-controller"

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.quotas = informers.get("resourcequotas")
        self.pods = informers.get("pods")
        self.quotas.add_handler(self.enqueue, lambda old, new: self.enqueue(new), None)
        self.pods.add_handler(self._ns_changed, lambda old, new: self._ns_changed(new), self._ns_changed)

    def _ns_changed(self, obj: dict) -> None:
        ns = obj["metadata"].get("namespace")
        for q in self.quotas.list():
            if q["metadata"].get("namespace") == ns:
                self.enqueue(q)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(super().run())
            tg.create_task(self._resync())

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(RESYNC)
            for q in self.quotas.list():
                self.enqueue(q)

    async def reconcile(self, key: str) -> None:
        ns, _, name = key.rpartition("/")
        q = self.quotas.get(name, ns)
        if q is None:
            return
        hard = (q.get("spec") or {}).get("hard") or {}
        objects: dict[str, list] = {}
        for k in hard:
            res = quota.resource_for_key(k)
            if res is None or f"{res.name}.{res.group}" in objects:
                continue
            if res.name == "pods" and not res.group:
                objects["pods."] = [p for p in self.pods.list() if p["metadata"].get("namespace") == ns]
            else:
                objects[f"{res.name}.{res.group}"] = (await self.client.list(res, ns))["items"]
        status = {"hard": dict(hard), "used": quota.usage(hard, objects)}
        if (q.get("status") or {}) == status:
            return
        new = copy.deepcopy(q)
        new["status"] = status
        try:
            await self.client.update_status("resourcequotas", new)
        except ClientError as e:
            if e.conflict:
                self.queue.add_after(key, 0.2)
            elif not e.not_found:
                raise

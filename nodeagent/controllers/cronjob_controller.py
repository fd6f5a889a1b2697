"""The CronJob loop: starts Jobs on schedule (decisions in cronjob.py), requeued for the next start time."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

from nodeagent.api.objects import Obj
from nodeagent.client.rest import ClientError
from nodeagent.clock import utcnow
from nodeagent.controllers import cronjob, podutil
from nodeagent.controllers.base import Controller, SharedInformers, split_key


class CronJobController(Controller):
    name = "cronjob"
    service_account = "cronjob-controller"

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.cronjobs = informers.get("cronjobs")
        self.jobs = informers.get("jobs")
        self.cronjobs.add_handler(self.enqueue, lambda old, new: self.enqueue(new), None)
        self.jobs.add_handler(self._job, lambda old, new: self._job(new), self._job)

    def _job(self, job: Obj) -> None:
        ref = podutil.controller_ref(job)
        if ref and ref.get("kind") == "CronJob":
            self.queue.add(f"{job['metadata'].get('namespace')}/{ref['name']}")

    async def run(self) -> None:
        """Workers, plus a periodic look at every CronJob (clock jumps, missed wake-ups)."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(super().run())
            tg.create_task(self._resync())

    async def _resync(self) -> None:
        while True:
            await self.options.clock.sleep(self.options.cronjob_resync)
            for c in self.cronjobs.list():
                self.enqueue(c)

    async def reconcile(self, key: str) -> None:
        ns, name = split_key(key)
        cj = self.cronjobs.get(name, ns)
        if cj is None or podutil.is_terminating(cj):
            return
        uid = cj["metadata"].get("uid")
        owned = [j for j in self.jobs.list() if j["metadata"].get("namespace") == ns
                 and (podutil.controller_ref(j) or {}).get("uid") == uid]
        p = cronjob.plan(cj, owned, utcnow(self.options.clock))
        for type_, reason, msg in p.events:
            self.recorder.record(cj, type_, reason, msg)
        for j in p.delete_active:
            await self._delete_job(cj, j, "SuccessfulDelete", f"Deleted job {j['metadata']['name']}")
        for j in p.delete_history:
            await self._delete_job(cj, j, "SuccessfulDelete", f"Deleted job {j['metadata']['name']}")
        status = dict(p.status)
        if p.create is not None:
            try:
                created = await self.client.create("jobs", p.create, ns)
                self.recorder.record(cj, "Normal", "SuccessfulCreate",
                                     f"Created job {created['metadata']['name']}")
                status["active"] = [*status.get("active", []), cronjob._ref(created)]
            except ClientError as e:
                if not e.already_exists:
                    self.recorder.record(cj, "Warning", "FailedCreate", f"Error creating job: {e.message}")
                    raise
        if (cj.get("status") or {}) != status:
            new = copy.deepcopy(cj)
            new["status"] = status
            try:
                await self.client.update_status("cronjobs", new)
            except ClientError as e:
                if not (e.not_found or e.conflict):
                    raise
                if e.conflict:
                    self.queue.add_after(key, 0.1)
        if p.requeue_after is not None:
            self.queue.add_after(key, p.requeue_after)

    async def _delete_job(self, cj: Obj, job: Mapping[str, Any], reason: str, msg: str) -> None:
        try:
            await self.client.delete("jobs", job["metadata"]["name"], job["metadata"].get("namespace"),
                                     propagation="Background")
            self.recorder.record(cj, "Normal", reason, msg)
        except ClientError as e:
            if not e.not_found:
                raise

"""The Job loop: runs pods to completion, fails on backoff limit or deadline, deletes after the TTL."""

from __future__ import annotations

import copy

from nodeagent.client.rest import ClientError
from nodeagent.clock import utcnow
from nodeagent.controllers import job as jobs
from nodeagent.controllers import podutil
from nodeagent.controllers.base import split_key
from nodeagent.controllers.workload_base import PodOwnerController


class JobController(PodOwnerController):
    name = "job"
    service_account = "job-controller"
    resource = "jobs"
    kind = "Job"

    async def reconcile(self, key: str) -> None:
        ns, name = split_key(key)
        job = self.owners.get(name, ns)
        if job is None:
            return
        now = utcnow(self.options.clock)
        if podutil.is_terminating(job):
            return
        left = jobs.ttl_left(job, now)
        if left is not None:
            if left <= 0:
                try:
                    await self.client.delete("jobs", name, ns, propagation="Background")
                except ClientError as e:
                    if not e.not_found:
                        raise
                return
            self.queue.add_after(key, left)
        p = jobs.plan(job, self.owned_pods(job), now, self.options.job_backoff_base,
                      self.options.job_backoff_max)
        if self.expectations.satisfied(key):
            if p.create:
                self.expectations.expect(key, adds=p.create)
                template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
                for _ in range(p.create):
                    pod = podutil.pod_from_template(template, job, ns or "default", name,
                                                    jobs.pod_template_labels(job))
                    await self.create_pod(key, job, pod)
            if p.create_indexes:
                self.expectations.expect(key, adds=len(p.create_indexes))
                template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
                for i in p.create_indexes:
                    pod = podutil.pod_from_template(template, job, ns or "default", name,
                                                    jobs.pod_template_labels(job))
                    await self.create_pod(key, job, jobs.indexed_pod(pod, name, i))
            if p.delete:
                self.expectations.expect(key, deletes=len(p.delete))
                for victim in p.delete:
                    await self.delete_pod(key, job, victim)
        if p.finished == "Complete":
            self.recorder.record(job, "Normal", "Completed", "Job completed")
        elif p.finished == "Failed":
            self.recorder.record(job, "Warning", p.reason, p.message)
        await self.write_status(job, p.status)
        if p.requeue_after is not None:
            self.queue.add_after(key, p.requeue_after)
        if p.finished and (job.get("spec") or {}).get("ttlSecondsAfterFinished") is not None:
            self.queue.add_after(key, float(job["spec"]["ttlSecondsAfterFinished"]))

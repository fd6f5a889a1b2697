"""The PodGC loop: force-deletes pods whose node is gone, and old terminated pods, every period.

A node missing from the cache is only believed gone after it has stayed missing for the
quarantine (kube's podgc: 40 s) and a live GET confirms it: a pod may name a node that
has not registered yet, and a lagging cache must not cost anyone their pods.
"""

from __future__ import annotations

import asyncio

from nodeagent.client.rest import ClientError
from nodeagent.controllers import podgc
from nodeagent.controllers.base import Controller, SharedInformers


class PodGCController(Controller):
    name = "podgc"
    service_account = "pod-garbage-collector"

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.pods = informers.get("pods")
        self.nodes = informers.get("nodes")
        self._missing_since: dict[str, float] = {}

    async def run(self) -> None:
        while True:
            try:
                await self.gc_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.log.warning("podgc: %s", e)
            await self.options.clock.sleep(self.options.pod_gc_period)

    async def gc_once(self) -> int:
        """One pass; returns how many pods were deleted."""
        pods = self.pods.list()
        known = {n["metadata"]["name"] for n in self.nodes.list()}
        victims = list(podgc.terminated_over_threshold(pods, self.options.terminated_pod_gc_threshold))
        victims += podgc.unscheduled_terminating(pods)
        gone: dict[str, bool] = {}
        now = self.options.clock.monotonic()
        orphans = podgc.orphaned(pods, known)
        missing = {p["spec"]["nodeName"] for p in orphans}
        self._missing_since = {n: self._missing_since.get(n, now) for n in missing}
        for pod in orphans:
            node = pod["spec"]["nodeName"]
            if now - self._missing_since[node] < self.options.pod_gc_orphan_quarantine:
                continue  # still in quarantine
            if node not in gone:  # the cache may lag: ask the apiserver before deleting anything
                try:
                    await self.client.get("nodes", node)
                    gone[node] = False
                except ClientError as e:
                    if not e.not_found:
                        raise
                    gone[node] = True
            if gone[node]:
                victims.append(pod)
        n = 0
        for pod in victims:
            meta = pod["metadata"]
            try:
                await self.client.delete("pods", meta["name"], meta.get("namespace"), grace_period=0)
                n += 1
                self.log.info("podgc: force-deleted %s/%s (node %s)", meta.get("namespace"), meta["name"],
                              (pod.get("spec") or {}).get("nodeName") or "-")
            except ClientError as e:
                if not e.not_found:
                    raise
        return n

"""The PodGC loop: force-deletes pods whose node is gone, and old terminated pods, every period."""

from __future__ import annotations

import asyncio

from nodeagent.client.rest import ClientError
from nodeagent.controllers import podgc
from nodeagent.controllers.base import Controller, SharedInformers


class PodGCController(Controller):
    name = "podgc"

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.pods = informers.get("pods")
        self.nodes = informers.get("nodes")

    async def run(self) -> None:
        while True:
            try:
                await self.gc_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.log.warning("podgc: %s", e)
            await asyncio.sleep(self.options.pod_gc_period)

    async def gc_once(self) -> int:
        """One pass; returns how many pods were deleted."""
        pods = self.pods.list()
        known = {n["metadata"]["name"] for n in self.nodes.list()}
        victims = list(podgc.terminated_over_threshold(pods, self.options.terminated_pod_gc_threshold))
        victims += podgc.unscheduled_terminating(pods)
        gone: dict[str, bool] = {}
        for pod in podgc.orphaned(pods, known):
            node = pod["spec"]["nodeName"]
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

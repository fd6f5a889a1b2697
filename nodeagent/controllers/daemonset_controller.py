"""The DaemonSet loop: one pod per eligible node, rolled by maxUnavailable (decisions in daemonset.py)."""

from __future__ import annotations

import asyncio

from nodeagent.clock import utcnow
from nodeagent.controllers import daemonset, podutil
from nodeagent.controllers.base import SharedInformers, split_key
from nodeagent.controllers.workload_base import PodOwnerController


class DaemonSetController(PodOwnerController):
    name = "daemonset"
    service_account = "daemon-set-controller"
    resource = "daemonsets"
    kind = "DaemonSet"

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.nodes = informers.get("nodes")
        self.nodes.add_handler(self._all, lambda old, new: self._all(), self._all)

    def _all(self, *_: object) -> None:
        for ds in self.owners.list():
            self.enqueue(ds)

    async def reconcile(self, key: str) -> None:
        ns, name = split_key(key)
        ds = self.owners.get(name, ns)
        if ds is None:
            return
        pods = self.owned_pods(ds)
        p = daemonset.plan(ds, self.nodes.list(), pods, utcnow(self.options.clock))
        rev = daemonset.revision_hash(ds)
        if not podutil.is_terminating(ds):
            await self.sync_revisions(ds, f"{name}-{rev}", rev, pods)
        if self.expectations.satisfied(key) and not podutil.is_terminating(ds):
            if p.create:
                self.expectations.expect(key, adds=len(p.create))
                await asyncio.gather(*(self.create_pod(key, ds, daemonset.pod_for_node(ds, n, rev))
                                       for n in p.create))
            elif p.delete:
                self.expectations.expect(key, deletes=len(p.delete))
                for pod in p.delete:
                    await self.delete_pod(key, ds, pod)
        await self.write_status(ds, p.status)

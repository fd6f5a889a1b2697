"""The disruption controller's loop: every PodDisruptionBudget's status kept current from its pods.

Informer handlers only enqueue the budgets a change may touch (a pod's, or every budget of the namespace
when a workload is rescaled); `reconcile` computes with `disruption.py` and writes `status` only when it
changed. The eviction subresource reads this status (and decrements it) before it deletes a pod.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from nodeagent.api import pdb as pdbutil
from nodeagent.api.objects import Obj
from nodeagent.api.selectors import SelectorError, from_label_selector
from nodeagent.api.times import format_time
from nodeagent.client.informer import SharedInformers
from nodeagent.client.rest import ClientError
from nodeagent.clock import utcnow
from nodeagent.controllers import disruption, podutil
from nodeagent.controllers.base import Controller, split_key

_SCALED = {"ReplicationController": "replicationcontrollers", "StatefulSet": "statefulsets",
           "ReplicaSet": "replicasets", "Deployment": "deployments"}
UNMANAGED_MESSAGE = ("Pods selected by this PodDisruptionBudget (selector: {}) were found to be unmanaged or "
                     "managed by an unsupported controller (missing a /scale subresource). As a result, the "
                     "status of the PDB cannot be calculated correctly, which may result in undefined "
                     "behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB "
                     "to an integer value.")


class DisruptionController(Controller):
    name = "disruption"
    service_account = "disruption-controller"
    workers = 2

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.pdbs = informers.get("poddisruptionbudgets")
        self.pods = informers.get("pods")
        self.owners = {kind: informers.get(res) for kind, res in _SCALED.items()}
        self.pdbs.add_handler(self.enqueue, lambda old, new: self.enqueue(new), None)
        self.pods.add_handler(self._pod_changed, lambda old, new: self._pod_changed(new), self._pod_changed)
        for inf in self.owners.values():
            inf.add_handler(self._owner_changed, lambda old, new: self._owner_changed(new),
                            self._owner_changed)

    # -- handlers: record, never write --------------------------------------------------------------
    def _pod_changed(self, pod: Obj) -> None:
        ns = pod["metadata"].get("namespace")
        labels = pod["metadata"].get("labels") or {}
        for pdb in self.pdbs.list():
            if pdb["metadata"].get("namespace") != ns:
                continue
            sel = (pdb.get("spec") or {}).get("selector")
            try:
                if sel is not None and from_label_selector(sel).matches(labels):
                    self.enqueue(pdb)
            except SelectorError:
                continue

    def _owner_changed(self, owner: Obj) -> None:
        ns = owner["metadata"].get("namespace")
        for pdb in self.pdbs.list():
            if pdb["metadata"].get("namespace") == ns:
                self.enqueue(pdb)

    # -- scale finders (getPodReplicationController, getPodDeployment, getPodReplicaSet, getPodStatefulSet)
    def _find(self, pod: Mapping[str, Any]) -> tuple[str, int] | None:
        ref = podutil.controller_ref(pod)
        if ref is None:
            return None
        ns = pod["metadata"].get("namespace")
        kind = ref.get("kind", "")
        inf = self.owners.get(kind)
        if inf is None:
            raise LookupError(f"found no controllers for pod {pod['metadata']['name']!r}: "
                              f"{kind} has no scale this controller can read")
        owner = inf.get(ref.get("name", ""), ns)
        if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
            raise LookupError(f"found no controllers for pod {pod['metadata']['name']!r}")
        if kind == "ReplicaSet":
            dref = podutil.controller_ref(owner)
            if dref is not None and dref.get("kind") == "Deployment":
                dep = self.owners["Deployment"].get(dref.get("name", ""), ns)
                if dep is None or dep["metadata"].get("uid") != dref.get("uid"):
                    raise LookupError(f"found no controllers for pod {pod['metadata']['name']!r}")
                owner = dep
        return owner["metadata"]["uid"], int((owner.get("spec") or {}).get("replicas", 1) or 0)

    # -- reconcile ---------------------------------------------------------------------------------
    async def reconcile(self, key: str) -> None:
        ns, name = split_key(key)
        cached = self.pdbs.get(name, ns)
        if cached is None or podutil.is_terminating(cached):
            return
        pdb = copy.deepcopy(cached)
        now = utcnow(self.options.clock)
        stamp = format_time(now)
        try:
            computed = disruption.compute(pdb, self.pods.list(), self._find, now)
        except (disruption.SyncError, SelectorError) as e:
            status = disruption.failsafe_status(pdb, str(e))
            pdbutil.set_condition(status, pdbutil.DISRUPTION_ALLOWED, "False", pdbutil.SYNC_FAILED, str(e),
                                  int(status.get("observedGeneration") or 0), stamp)
            await self._write(pdb, status)
            raise
        if computed.unmanaged:
            self.recorder.record(pdb, "Warning", "UnmanagedPods",
                                 UNMANAGED_MESSAGE.format((pdb.get("spec") or {}).get("selector")))
        status = disruption.new_status(pdb, computed)
        pdbutil.update_disruption_allowed_condition(status, stamp)
        await self._write(pdb, status)
        if computed.recheck is not None:
            self.queue.add_after(key, max(0.0, (computed.recheck - now).total_seconds()))

    async def _write(self, pdb: Obj, status: dict[str, Any]) -> None:
        if (pdb.get("status") or {}) == status:
            return
        pdb["status"] = status
        try:
            await self.client.update_status("poddisruptionbudgets", pdb)
        except ClientError as e:
            if not e.not_found:
                raise

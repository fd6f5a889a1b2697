"""The scheduler as a control-plane component: informers in, bindings/events/status out, under a Lease.

Wires the algorithm core (scheduler.py) to the API through the interfaces in
api.py: shared informers feed Pod and Node events and back the listers; binds
POST pods/<name>/binding; FailedScheduling/Scheduled/Preempted become Events;
the PodScheduled condition and nominatedNodeName go through pods/<name>/status.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Mapping
from typing import Any

from nodeagent.api.selectors import Selector, from_label_selector
from nodeagent.client.events import EventRecorder
from nodeagent.client.informer import SharedInformers
from nodeagent.client.leader import LeaderElector
from nodeagent.client.rest import Client, ClientError
from nodeagent.scheduler.api import EventHandler, SchedulerAPI
from nodeagent.scheduler.config import SchedulerServiceConfig
from nodeagent.scheduler.profile import load_config
from nodeagent.scheduler.scheduler import Scheduler

log = logging.getLogger("nodeagent.scheduler")

# Informers the listers read; only Pods and Nodes drive scheduling events.
LISTED = ("poddisruptionbudgets", "namespaces", "services", "replicasets", "statefulsets")
# Informers whose changes may make a waiting pod schedulable (the volume plugins' events).
VOLUME_KINDS = (("PersistentVolumeClaim", "persistentvolumeclaims"),
                ("PersistentVolume", "persistentvolumes"), ("StorageClass", "storageclasses"),
                ("CSINode", "csinodes"))


class ApiBackend:
    """Binder, EventRecorder, PodStatusPatcher, PodDeleter, Listers and EventSource over the real API."""

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder) -> None:
        self.client = client
        self.informers = informers
        self.recorder = recorder
        self.pods = informers.get("pods")
        self.nodes = informers.get("nodes")
        for r in LISTED:
            informers.get(r)
        for _, r in VOLUME_KINDS:
            informers.get(r)

    def api(self) -> SchedulerAPI:
        return SchedulerAPI(binder=self, recorder=self, patcher=self, deleter=self, listers=self,
                            volumes=self)

    # -- EventSource -----------------------------------------------------------------------------------
    async def run(self, handler: EventHandler, synced: asyncio.Event) -> None:
        sources = [("Node", self.nodes), ("Pod", self.pods)] + \
            [(kind, self.informers.get(r)) for kind, r in VOLUME_KINDS]
        for kind, inf in sources:
            inf.add_handler(lambda o, k=kind: handler.on_add(k, o),
                            lambda old, new, k=kind: handler.on_update(k, old, new),
                            lambda o, k=kind: handler.on_delete(k, o))
        async with asyncio.TaskGroup() as tg:
            await self.informers.run(tg)
            synced.set()

    # -- writes ----------------------------------------------------------------------------------------
    async def bind(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        await self.client.bind(namespace, name, node_name)

    async def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.recorder.record(obj, type_, reason, message)

    async def patch_status(self, namespace: str, name: str, *, condition: dict[str, Any] | None = None,
                           nominated_node_name: str | None = None) -> None:
        status: dict[str, Any] = {}
        if condition is not None:
            status["conditions"] = [condition]
        if nominated_node_name is not None:
            status["nominatedNodeName"] = nominated_node_name or None
        try:
            # Strategic merge: conditions merge by type, so the kubelet's conditions stay.
            await self.client.patch("pods", name, {"status": status}, namespace, patch_type="strategic",
                                    subresource="status")
        except ClientError as e:
            if not e.not_found:
                raise

    async def delete(self, namespace: str, name: str, uid: str,
                     grace_period_seconds: int | None = None) -> None:
        try:
            await self.client.delete("pods", name, namespace, grace_period=grace_period_seconds,
                                     preconditions={"uid": uid})
        except ClientError as e:
            if not (e.not_found or e.conflict):
                raise

    # -- VolumeAPI -------------------------------------------------------------------------------------
    def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.informers.get("persistentvolumeclaims").get(name, namespace)

    def volumes(self) -> list[dict[str, Any]]:
        return self.informers.get("persistentvolumes").list()

    def storage_class(self, name: str) -> dict[str, Any] | None:
        return self.informers.get("storageclasses").get(name)

    def csinode(self, name: str) -> dict[str, Any] | None:
        return self.informers.get("csinodes").get(name)

    async def bind_volume(self, volume: dict[str, Any], claim: Mapping[str, Any]) -> None:
        """The volume's claimRef set to the claim (kube-scheduler's volume binder's API write)."""
        m = claim.get("metadata") or {}
        ann = {**((volume.get("metadata") or {}).get("annotations") or {}),
               "pv.kubernetes.io/bound-by-controller": "yes"}
        new = {**volume, "metadata": {**volume["metadata"], "annotations": ann},
               "spec": {**(volume.get("spec") or {}), "claimRef": {
                   "kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": m.get("namespace"),
                   "name": m.get("name"), "uid": m.get("uid"), "resourceVersion": m.get("resourceVersion")}}}
        await self.client.update("persistentvolumes", new)

    async def select_node(self, claim: Mapping[str, Any], node_name: str) -> None:
        m = claim.get("metadata") or {}
        ann = {"volume.kubernetes.io/selected-node": node_name}
        await self.client.patch("persistentvolumeclaims", m["name"], {"metadata": {"annotations": ann}},
                                m.get("namespace"))

    # -- Listers ---------------------------------------------------------------------------------------
    def pdbs(self) -> list[dict[str, Any]]:
        return self.informers.get("poddisruptionbudgets").list()

    def priority_classes(self) -> list[dict[str, Any]]:
        """None: the Priority admission plugin sets every pod's spec.priority (kube-scheduler does not read
        PriorityClasses either, and its role does not let it)."""
        return []

    def namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        return {n["metadata"]["name"]: n["metadata"].get("labels") or {}
                for n in self.informers.get("namespaces").list()}

    def owner_selectors(self, pod: Mapping[str, Any]) -> list[Selector]:
        """Selectors of the Services, ReplicaSets and StatefulSets that select the pod (default spreading)."""
        meta = pod.get("metadata") or {}
        ns, labels = meta.get("namespace") or "default", meta.get("labels") or {}
        out: list[Selector] = []
        for svc in self.informers.get("services").list():
            sel = (svc.get("spec") or {}).get("selector")
            if svc["metadata"].get("namespace") == ns and sel:
                s = from_label_selector({"matchLabels": sel})
                if s.matches(labels):
                    out.append(s)
        for res in ("replicasets", "statefulsets"):
            for obj in self.informers.get(res).list():
                if obj["metadata"].get("namespace") != ns:
                    continue
                s = from_label_selector((obj.get("spec") or {}).get("selector"))
                if not s.is_everything and s.matches(labels):
                    out.append(s)
        return out


async def run_scheduler(client: Client, ready: asyncio.Event | None = None,
                        profile: str | None = None) -> None:
    """Schedule until cancelled (no leader election: tests and single servers)."""
    informers = SharedInformers(client, share=True)  # the process's caches; its assume cache stays its own
    recorder = EventRecorder(client, "default-scheduler", socket.gethostname())
    backend = ApiBackend(client, informers, recorder)
    scheduler = Scheduler(load_config(profile), backend.api())
    async with asyncio.TaskGroup() as tg:
        tg.create_task(recorder.run(), name="scheduler-events")
        tg.create_task(scheduler.run(ready, source=backend), name="scheduler")


# the kube-system Lease the replicas compete for: kube-scheduler's, the one its role may get and update
LEASE_NAME = "kube-scheduler"


def elector(client: Client, identity: str, lease_duration: float = 15.0, renew_deadline: float = 10.0,
            retry_period: float = 2.0) -> LeaderElector:
    """The scheduler's leader election: with several servers, only the Lease holder schedules."""
    return LeaderElector(client, LEASE_NAME, identity, lease_duration=lease_duration,
                         renew_deadline=renew_deadline, retry_period=retry_period)


async def serve(config: SchedulerServiceConfig, ready: asyncio.Event) -> None:
    """The `nodeagent server` / `up` component."""
    client = Client.from_kubeconfig(config.kubeconfig)
    try:
        el = elector(client, f"{socket.gethostname()}-{id(client):x}")
        ready.set()
        await el.run(lambda: run_scheduler(client, profile=config.profile))
    finally:
        await client.close()

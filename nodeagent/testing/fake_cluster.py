"""An in-memory cluster implementing every API interface the scheduler uses (tests, benchmarks).

It stores Nodes, Pods, PDBs, PriorityClasses, Namespaces and owner selectors as plain dicts in
Kubernetes shapes, delivers watch-like events synchronously to subscribed handlers, binds by
setting spec.nodeName, patches status, records Events, and deletes gracefully (deletionTimestamp
first, removal after `grace_delay` seconds of event-loop time, or at once when it is 0).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Mapping
from typing import Any

from nodeagent.api.selectors import Selector, from_label_selector
from nodeagent.scheduler.api import EventHandler, SchedulerAPI

_uid = itertools.count(1)


def make_node(name: str, cpu: str = "4", memory: str = "32Gi", pods: int = 110,
              labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None,
              unschedulable: bool = False, extra: dict[str, str] | None = None,
              images: list[tuple[list[str], int]] | None = None,
              conditions: list[dict[str, str]] | None = None, ephemeral: str | None = None) -> dict[str, Any]:
    alloc: dict[str, Any] = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if ephemeral:
        alloc["ephemeral-storage"] = ephemeral
    alloc.update(extra or {})
    lab = {"kubernetes.io/hostname": name}
    lab.update(labels or {})
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": lab, "uid": f"node-{name}"},
                            "spec": {}, "status": {"allocatable": alloc, "capacity": dict(alloc),
                                                   "conditions": conditions
                                                   or [{"type": "Ready", "status": "True"}]}}
    if taints:
        node["spec"]["taints"] = taints
    if unschedulable:
        node["spec"]["unschedulable"] = True
    if images:
        node["status"]["images"] = [{"names": n, "sizeBytes": s} for n, s in images]
    return node


def make_pod(name: str, cpu: str | None = None, memory: str | None = None, namespace: str = "default",
             labels: dict[str, str] | None = None, priority: int | None = None, node: str | None = None,
             image: str = "registry.k8s.io/pause:3.9", **spec: Any) -> dict[str, Any]:
    req = {}
    if cpu:
        req["cpu"] = cpu
    if memory:
        req["memory"] = memory
    container: dict[str, Any] = {"name": "c", "image": image}
    if req:
        container["resources"] = {"requests": req}
    s: dict[str, Any] = {"containers": [container], "schedulerName": "default-scheduler"}
    if priority is not None:
        s["priority"] = priority
    if node:
        s["nodeName"] = node
    s.update(spec)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}-{next(_uid)}",
                         "labels": labels or {},
                         "creationTimestamp": f"2026-01-01T00:00:{next(_uid) % 60:02d}Z"},
            "spec": s, "status": {"phase": "Pending"}}


class FakeCluster:
    """Binder, EventRecorder, PodStatusPatcher, PodDeleter, Listers and EventSource in one."""

    def __init__(self, grace_delay: float = 0.0):
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> pod
        self.by_name: dict[tuple[str, str], str] = {}  # (namespace, name) -> uid
        self.pdb_objs: list[dict[str, Any]] = []
        self.classes: list[dict[str, Any]] = []
        self.namespaces: dict[str, dict[str, str]] = {}
        self.owners: list[tuple[str, Selector]] = []  # (namespace, selector) of Services/ReplicaSets
        self.events: list[dict[str, Any]] = []
        self.handlers: list[EventHandler] = []
        self.grace_delay = grace_delay
        self.fail_binds: set[str] = set()  # pod names whose bind raises once
        self.binds = 0
        self.deleted: list[str] = []
        self._bg: set[asyncio.Task[Any]] = set()

    def api(self) -> SchedulerAPI:
        return SchedulerAPI(binder=self, recorder=self, patcher=self, deleter=self, listers=self)

    # -- EventSource ---------------------------------------------------------------------------------

    def subscribe(self, h: EventHandler) -> None:
        self.handlers.append(h)
        for n in self.nodes.values():
            h.on_add("Node", n)
        for p in self.pods.values():
            h.on_add("Pod", p)

    async def run(self, handler: EventHandler, synced: asyncio.Event) -> None:
        self.subscribe(handler)
        synced.set()
        await asyncio.Event().wait()

    def _emit(self, how: str, kind: str, *objs: dict[str, Any]) -> None:
        for h in self.handlers:
            getattr(h, how)(kind, *objs)

    # -- mutations (what kubectl/controllers would do) -----------------------------------------------

    def add_node(self, node: dict[str, Any]) -> None:
        self.nodes[node["metadata"]["name"]] = node
        self._emit("on_add", "Node", node)

    def update_node(self, node: dict[str, Any]) -> None:
        old = self.nodes[node["metadata"]["name"]]
        self.nodes[node["metadata"]["name"]] = node
        self._emit("on_update", "Node", old, node)

    def delete_node(self, name: str) -> None:
        old = self.nodes.pop(name)
        self._emit("on_delete", "Node", old)

    def add_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        meta = pod["metadata"]
        self.pods[meta["uid"]] = pod
        self.by_name[(meta.get("namespace") or "default", meta["name"])] = meta["uid"]
        self._emit("on_add", "Pod", pod)
        return pod

    def update_pod(self, pod: dict[str, Any]) -> None:
        old = self.pods[pod["metadata"]["uid"]]
        self.pods[pod["metadata"]["uid"]] = pod
        self._emit("on_update", "Pod", old, pod)

    def remove_pod(self, uid: str) -> None:
        old = self.pods.pop(uid, None)
        if old is not None:
            self._emit("on_delete", "Pod", old)

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        uid = self.by_name.get((namespace, name))
        if uid is None or uid not in self.pods:
            raise KeyError(f"{namespace}/{name}")
        return self.pods[uid]

    def node_of(self, name: str, namespace: str = "default") -> str | None:
        try:
            return self.pod(name, namespace)["spec"].get("nodeName")
        except KeyError:
            return None

    def add_pdb(self, pdb: dict[str, Any]) -> None:
        self.pdb_objs.append(pdb)
        self._emit("on_add", "PodDisruptionBudget", pdb)

    def events_for(self, name: str, reason: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events if e["involvedObject"]["name"] == name
                and (reason is None or e["reason"] == reason)]

    # -- Binder --------------------------------------------------------------------------------------

    async def bind(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        pod = self.pods.get(uid)
        if pod is None:
            raise LookupError(f'pods "{name}" not found')
        if name in self.fail_binds:
            self.fail_binds.discard(name)
            raise ConnectionError("injected bind failure")
        if pod["spec"].get("nodeName"):
            raise ValueError(f"pod {name} is already assigned to node {pod['spec']['nodeName']!r}")
        new = dict(pod)
        new["spec"] = dict(pod["spec"], nodeName=node_name)
        new["status"] = dict(pod.get("status") or {}, phase="Pending")
        self.binds += 1
        self.update_pod(new)

    # -- EventRecorder -------------------------------------------------------------------------------

    async def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        self.events.append({"type": type_, "reason": reason, "message": message,
                            "involvedObject": {"kind": obj.get("kind", "Pod"), "name": meta.get("name"),
                                               "namespace": meta.get("namespace"), "uid": meta.get("uid")}})

    # -- PodStatusPatcher ----------------------------------------------------------------------------

    async def patch_status(self, namespace: str, name: str, *, condition: dict[str, Any] | None = None,
                           nominated_node_name: str | None = None) -> None:
        try:
            pod = self.pod(name, namespace)
        except KeyError:
            return
        new = dict(pod)
        st = copy.deepcopy(pod.get("status") or {})
        if condition is not None:
            conds = [c for c in st.get("conditions") or () if c.get("type") != condition["type"]]
            conds.append(condition)
            st["conditions"] = conds
        if nominated_node_name is not None:
            if nominated_node_name:
                st["nominatedNodeName"] = nominated_node_name
            else:
                st.pop("nominatedNodeName", None)
        new["status"] = st
        self.update_pod(new)

    # -- PodDeleter ----------------------------------------------------------------------------------

    async def delete(self, namespace: str, name: str, uid: str,
                     grace_period_seconds: int | None = None) -> None:
        pod = self.pods.get(uid)
        if pod is None:
            return
        self.deleted.append(name)
        if self.grace_delay > 0:
            new = dict(pod)
            new["metadata"] = dict(pod["metadata"], deletionTimestamp="2026-01-01T00:00:00Z")
            self.update_pod(new)
            await asyncio.sleep(self.grace_delay)
        self.remove_pod(uid)

    # -- Listers -------------------------------------------------------------------------------------

    def pdbs(self) -> list[dict[str, Any]]:
        return self.pdb_objs

    def priority_classes(self) -> list[dict[str, Any]]:
        return self.classes

    def namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        return self.namespaces

    def owner_selectors(self, pod: Mapping[str, Any]) -> list[Selector]:
        meta = pod.get("metadata") or {}
        ns, labels = meta.get("namespace") or "default", meta.get("labels") or {}
        return [sel for n, sel in self.owners if n == ns and not sel.is_everything and sel.matches(labels)]

    def add_service(self, namespace: str, selector: dict[str, str]) -> None:
        self.owners.append((namespace, from_label_selector({"matchLabels": selector})))

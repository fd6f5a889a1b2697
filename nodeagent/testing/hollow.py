"""Hollow nodes (kubemark-style) for control-plane tests and benchmarks: no kernel, no runtime.

They register Ready Node objects, mark pods bound to them Running and Ready,
and finish graceful deletions as a kubelet would. Optionally they also bind
pending pods round-robin, standing in for the scheduler where a test does not
need it. Everything goes through the real API.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools

from nodeagent.api import taints as taintlib
from nodeagent.api.selectors import node_matches_selector_terms
from nodeagent.api.times import now_rfc3339
from nodeagent.client.rest import Client, ClientError

LEASE_NAMESPACE = "kube-node-lease"


def node_object(name: str, cpu: str = "32", memory: str = "128Gi", pods: str = "1000",
                labels: dict[str, str] | None = None) -> dict:
    now = now_rfc3339()
    capacity = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "100Gi"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              **(labels or {})}},
        "spec": {},
        "status": {
            "capacity": capacity, "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "hollow node", "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.30.0-hollow", "containerRuntimeVersion": "hollow://0",
                         "operatingSystem": "linux", "architecture": "amd64"},
        },
    }


class HollowNodes:
    def __init__(self, client: Client, names: list[str], bind: bool = False, ready: bool = True,
                 heartbeat: float = 10.0, labels: dict[str, dict[str, str]] | None = None) -> None:
        self.client = client
        self.names = names
        self.bind = bind
        self.make_ready = ready
        self.heartbeat = heartbeat  # seconds between Lease renewals (0: none; then the node goes Unknown)
        self.labels = labels or {}
        self.dead: set[str] = set()  # nodes that stopped: no heartbeat, no pod handling, never chosen
        self._next = itertools.cycle(names)
        self._nodes: dict[str, dict] = {}
        self._nodes_at = 0.0
        self._unbound: dict[tuple[str, str], dict] = {}  # pods no node fit yet: tried again

    def kill(self, name: str) -> None:
        """The node's kubelet stops: its Lease is no longer renewed and its pods are left alone."""
        self.dead.add(name)

    async def register(self) -> None:
        for n in self.names:
            with contextlib.suppress(ClientError):
                await self.client.create("nodes", node_object(n, labels=self.labels.get(n)))

    async def remove(self) -> None:
        for n in self.names:
            with contextlib.suppress(ClientError):
                await self.client.delete("nodes", n)

    async def run(self) -> None:
        """Act on pods (and renew Leases) until cancelled."""
        async with asyncio.TaskGroup() as tg:
            if self.heartbeat > 0:
                tg.create_task(self._heartbeats())
            tg.create_task(self._pods())
            if self.bind:
                tg.create_task(self._retry_unbound())

    async def _retry_unbound(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            for key, pod in list(self._unbound.items()):
                self._unbound.pop(key, None)
                with contextlib.suppress(ClientError):
                    await self._handle(pod)

    async def _heartbeats(self) -> None:
        while True:
            now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            for n in self.names:
                if n in self.dead:
                    continue
                lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                         "metadata": {"name": n, "namespace": LEASE_NAMESPACE},
                         "spec": {"holderIdentity": n, "leaseDurationSeconds": 40, "renewTime": now}}
                try:
                    try:
                        await self.client.patch("leases", n, {"spec": lease["spec"]}, LEASE_NAMESPACE)
                    except ClientError as e:
                        if not e.not_found:
                            raise
                        await self.client.create("leases", lease, LEASE_NAMESPACE)
                except ClientError:
                    pass
            await asyncio.sleep(self.heartbeat)

    async def _node_cache(self) -> dict[str, dict]:
        loop = asyncio.get_running_loop()
        if loop.time() - self._nodes_at > 0.3:
            fresh = {}
            for n in self.names:
                with contextlib.suppress(ClientError):
                    fresh[n] = await self.client.get("nodes", n)
            self._nodes, self._nodes_at = fresh, loop.time()
        return self._nodes

    async def _choose(self, spec: dict) -> str | None:
        """Round-robin over live nodes that fit the pod's nodeSelector, required affinity and taints."""
        plain = not (spec.get("nodeSelector") or spec.get("affinity"))
        nodes = await self._node_cache()
        for _ in range(len(self.names)):
            n = next(self._next)
            if n in self.dead:
                continue
            node = nodes.get(n)
            if node is None:
                continue
            if taintlib.first_untolerated((node.get("spec") or {}).get("taints") or [],
                                          spec.get("tolerations") or [], ("NoSchedule", "NoExecute")):
                continue
            if plain:
                return n
            labels = node["metadata"].get("labels") or {}
            if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
                continue
            required = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
                         .get("requiredDuringSchedulingIgnoredDuringExecution"))
                        or {}).get("nodeSelectorTerms")
            if required and not node_matches_selector_terms(node, required):
                continue
            return n
        return None

    async def _pods(self, workers: int = 16) -> None:
        """A watcher feeds a queue that `workers` drain concurrently (a serial loop cannot keep up with
        1,000s)."""
        queue: asyncio.Queue[dict] = asyncio.Queue()
        async with asyncio.TaskGroup() as tg:
            for _ in range(workers):
                tg.create_task(self._worker(queue))
            while True:
                try:
                    listed = await self.client.list("pods")
                    for pod in listed["items"]:
                        queue.put_nowait(pod)
                    since = listed["metadata"]["resourceVersion"]
                    async for ev in self.client.watch("pods", resource_version=since, timeout_seconds=300):
                        if ev["type"] == "DELETED":
                            m = ev["object"]["metadata"]
                            self._unbound.pop((m.get("namespace"), m.get("name")), None)
                        if ev["type"] in ("ADDED", "MODIFIED"):
                            queue.put_nowait(ev["object"])
                except ClientError:
                    await asyncio.sleep(0.2)

    async def _worker(self, queue: asyncio.Queue) -> None:
        while True:
            pod = await queue.get()
            with contextlib.suppress(ClientError):
                await self._handle(pod)

    async def _handle(self, pod: dict) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        node = spec.get("nodeName")
        try:
            if not node:
                if self.bind and not meta.get("deletionTimestamp"):
                    target = await self._choose(spec)
                    if target:
                        await self.client.bind(meta["namespace"], meta["name"], target)
                    else:
                        self._unbound[(meta["namespace"], meta["name"])] = pod
                return
            if node not in self.names or node in self.dead:
                return
            if meta.get("deletionTimestamp"):
                await self.client.delete("pods", meta["name"], meta["namespace"], grace_period=0)
                return
            status = pod.get("status") or {}
            if self.make_ready and status.get("phase") not in ("Running", "Succeeded", "Failed"):
                now = now_rfc3339()
                pod["status"] = {**status, "phase": "Running", "hostIP": "127.0.0.1", "podIP": "10.244.0.2",
                                 "startTime": now,
                                 "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                                                for t in ("PodScheduled", "Initialized",
                                                          "ContainersReady", "Ready")],
                                 "containerStatuses": [{"name": c["name"], "image": c.get("image", ""),
                                                        "ready": True, "started": True, "restartCount": 0,
                                                        "state": {"running": {"startedAt": now}}}
                                                       for c in spec.get("containers") or []]}
                await self.client.update_status("pods", pod)
        except ClientError as e:
            if not (e.not_found or e.conflict):
                raise

"""Hollow nodes (kubemark-style) for control-plane tests and benchmarks: no kernel, no runtime.

They register Ready Node objects, mark pods bound to them Running and Ready,
and finish graceful deletions as a kubelet would. Optionally they also bind
pending pods round-robin, standing in for the scheduler where a test does not
need it. Everything goes through the real API.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools

from nodeagent.api.times import now_rfc3339
from nodeagent.client.rest import Client, ClientError


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
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.30.0-hollow", "containerRuntimeVersion": "hollow://0",
                         "operatingSystem": "linux", "architecture": "amd64"},
        },
    }


class HollowNodes:
    def __init__(self, client: Client, names: list[str], bind: bool = False, ready: bool = True) -> None:
        self.client = client
        self.names = names
        self.bind = bind
        self.make_ready = ready
        self._next = itertools.cycle(names)

    async def register(self) -> None:
        for n in self.names:
            with contextlib.suppress(ClientError):
                await self.client.create("nodes", node_object(n))

    async def remove(self) -> None:
        for n in self.names:
            with contextlib.suppress(ClientError):
                await self.client.delete("nodes", n)

    async def run(self, workers: int = 16) -> None:
        """Act on pods until cancelled: a watcher feeds a queue that `workers` drain concurrently."""
        queue: asyncio.Queue[dict] = asyncio.Queue()
        async with asyncio.TaskGroup() as tg:
            for _ in range(workers):
                tg.create_task(self._worker(queue))
            while True:
                try:
                    listed = await self.client.list("pods")
                    for pod in listed["items"]:
                        queue.put_nowait(pod)
                    async for ev in self.client.watch("pods",
                                                      resource_version=listed["metadata"]["resourceVersion"],
                                                      timeout_seconds=300):
                        if ev["type"] in ("ADDED", "MODIFIED"):
                            queue.put_nowait(ev["object"])
                except ClientError:
                    await asyncio.sleep(0.2)

    async def _worker(self, queue: asyncio.Queue) -> None:
        while True:
            pod = await queue.get()
            try:
                await self._handle(pod)
            except ClientError:
                pass

    async def _handle(self, pod: dict) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        node = spec.get("nodeName")
        try:
            if not node:
                if self.bind and not meta.get("deletionTimestamp"):
                    await self.client.bind(meta["namespace"], meta["name"], next(self._next))
                return
            if node not in self.names:
                return
            if meta.get("deletionTimestamp"):
                await self.client.delete("pods", meta["name"], meta["namespace"], grace_period=0)
                return
            status = pod.get("status") or {}
            if self.make_ready and status.get("phase") != "Running":
                now = now_rfc3339()
                pod["status"] = {**status, "phase": "Running", "hostIP": "127.0.0.1", "podIP": "10.244.0.2",
                                 "startTime": now,
                                 "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                                                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
                                 "containerStatuses": [{"name": c["name"], "image": c.get("image", ""),
                                                        "ready": True, "started": True, "restartCount": 0,
                                                        "state": {"running": {"startedAt": now}}}
                                                       for c in spec.get("containers") or []]}
                await self.client.update_status("pods", pod)
        except ClientError as e:
            if not (e.not_found or e.conflict):
                raise

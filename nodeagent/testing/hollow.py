"""Hollow nodes (kubemark-style) for control-plane tests and benchmarks: no kernel, no runtime.

Each registers a Ready Node (110 pods, as a kubelet's default --max-pods), renews its Lease in
kube-node-lease, and acts on the pods bound to it as a kubelet whose containers start at once: a status
that says Running and Ready (conditions, podIP from the node's podCIDR, containerStatuses), and the
final delete (grace 0, UID precondition) of a pod being deleted. One list+watch of pods and one of
nodes serve every hollow node of the process (kubemark runs one per process; the shared watch keeps
1,000 of them affordable), but each node writes with its own client when `node_client` gives one (a
`system:node:<name>` identity, so the Node authorizer judges its writes as a kubelet's). Optionally
they also bind pending pods round-robin, standing in for the scheduler where a test does not need it.
Everything goes through the real API.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import random
from collections.abc import Callable

from nodeagent.api import taints as taintlib
from nodeagent.api.selectors import node_matches_selector_terms
from nodeagent.api.times import format_micro, now, now_rfc3339
from nodeagent.client.rest import Client, ClientError

LEASE_NAMESPACE = "kube-node-lease"
DEFAULT_MAX_PODS = "110"  # kubelet's --max-pods default
# pod IPs of a node that has no podCIDR (a server run with --allocate-node-cidrs=false): a /24 per node
FALLBACK_RANGE = ipaddress.ip_network("10.250.0.0/16")


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


class PodIPs:
    """One node's pod addresses: the lowest free host of its range, released when the pod is gone (as
    host-local IPAM hands them out)."""

    def __init__(self, cidr: str) -> None:
        self.network = ipaddress.ip_network(cidr, strict=False)
        self._by_pod: dict[str, str] = {}
        self._hosts = itertools.islice(self.network.hosts(), 1, None)  # .1 is the bridge's
        self._free: list[str] = []

    def assign(self, uid: str) -> str:
        ip = self._by_pod.get(uid)
        if ip is None:
            ip = self._free.pop() if self._free else str(next(self._hosts))
            self._by_pod[uid] = ip
        return ip

    def release(self, uid: str) -> None:
        ip = self._by_pod.pop(uid, None)
        if ip is not None:
            self._free.append(ip)


def running_status(pod: dict, pod_ip: str, host_ip: str, now: str) -> dict:
    """The status a kubelet writes once every container of `pod` runs and is ready (init containers
    done)."""
    spec = pod.get("spec") or {}
    uid = pod["metadata"].get("uid", "")
    conditions = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
                  for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                            "PodScheduled")]

    def container(c: dict, state: dict, ready: bool) -> dict:
        return {"name": c["name"], "image": c.get("image", ""), "imageID": f"hollow://{c.get('image', '')}",
                "containerID": f"hollow://{uid}/{c['name']}", "ready": ready, "started": ready,
                "restartCount": 0, "state": state}

    status = {"phase": "Running", "conditions": conditions, "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
              "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "startTime": now,
              "containerStatuses": [container(c, {"running": {"startedAt": now}}, True)
                                    for c in spec.get("containers") or []]}
    inits = spec.get("initContainers") or []
    if inits:
        done = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}
        status["initContainerStatuses"] = [container(c, done, False) for c in inits]
    return status


class HollowNodes:
    def __init__(self, client: Client, names: list[str], bind: bool = False, ready: bool = True,
                 heartbeat: float = 10.0, labels: dict[str, dict[str, str]] | None = None,
                 pods: str = DEFAULT_MAX_PODS, node_client: Callable[[str], Client] | None = None) -> None:
        self.client = client  # watches (shared) and binds
        self.names = names
        self._members = set(names)
        self.bind = bind
        self.make_ready = ready
        self.heartbeat = heartbeat  # seconds between Lease renewals (0: none; then the node goes Unknown)
        self.labels = labels or {}
        self.pods = pods
        self._node_client = node_client
        self.dead: set[str] = set()  # nodes that stopped: no heartbeat, no pod handling, never chosen
        self._next = itertools.cycle(names)
        self._nodes: dict[str, dict] = {}  # our Node objects as the node watch last showed them
        self._nodes_synced = asyncio.Event()
        self._ips: dict[str, PodIPs] = {}
        self._unbound: dict[tuple[str, str], dict] = {}  # pods no node fit yet: tried again
        self.on_written: Callable[[str, dict], None] | None = None  # (what, pod) after each pod write

    def client_of(self, node: str) -> Client:
        """The client `node` writes with: its own identity when the caller gave one, else the shared one."""
        return self._node_client(node) if self._node_client is not None else self.client

    def kill(self, name: str) -> None:
        """The node's kubelet stops: its Lease is no longer renewed and its pods are left alone."""
        self.dead.add(name)

    async def register(self) -> None:
        for n in self.names:
            with contextlib.suppress(ClientError):
                await self.client_of(n).create("nodes", node_object(n, pods=self.pods,
                                                                    labels=self.labels.get(n)))

    async def remove(self) -> None:
        for n in self.names:
            with contextlib.suppress(ClientError):
                await self.client.delete("nodes", n)

    async def run(self) -> None:
        """Act on pods (and renew Leases) until cancelled."""
        async with asyncio.TaskGroup() as tg:
            if self.heartbeat > 0:
                tg.create_task(self._heartbeats())
            tg.create_task(self._watch_nodes())
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

    async def _renew(self, name: str, now: str) -> None:
        client = self.client_of(name)
        spec = {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now}
        try:
            try:
                await client.patch("leases", name, {"spec": spec}, LEASE_NAMESPACE)
            except ClientError as e:
                if not e.not_found:
                    raise
                await client.create("leases", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                               "metadata": {"name": name, "namespace": LEASE_NAMESPACE},
                                               "spec": spec}, LEASE_NAMESPACE)
        except ClientError:
            pass  # the next renewal tries again, as the kubelet's lease controller does

    async def _heartbeats(self) -> None:
        """Every Lease renewed at once first (each kubelet creates its Lease as it starts), then each node
        on its own period, spread over the interval as kubelets started at different times are, with the
        node lease controller's 4 % jitter (kubelet's `wait.JitterUntil(renewInterval, 0.04)`): renewals
        in lockstep would measure a thundering herd no real cluster sends."""
        live = [n for n in self.names if n not in self.dead]
        for i in range(0, len(live), 32):  # a few at a time: 1,000 nodes renew within seconds
            await asyncio.gather(*(self._renew(n, format_micro(now())) for n in live[i:i + 32]))
        async with asyncio.TaskGroup() as tg:
            for i, n in enumerate(live):
                tg.create_task(self._heartbeat(n, self.heartbeat * i / len(live)))

    async def _heartbeat(self, name: str, phase: float) -> None:
        await asyncio.sleep(phase)
        while name not in self.dead:
            await asyncio.sleep(self.heartbeat * (1 + random.uniform(0, 0.04)))
            if name not in self.dead:
                await self._renew(name, format_micro(now()))

    async def _watch_nodes(self) -> None:
        """Our Node objects (podCIDR, taints, labels) from one list+watch, relisted when it breaks."""
        while True:
            try:
                listed = await self.client.list("nodes")
                self._nodes = {n["metadata"]["name"]: n for n in listed["items"]
                               if n["metadata"]["name"] in self._members}
                self._nodes_synced.set()
                since = listed["metadata"]["resourceVersion"]
                async for ev in self.client.watch("nodes", resource_version=since, timeout_seconds=300):
                    obj = ev["object"]
                    name = obj["metadata"].get("name")
                    if ev["type"] == "BOOKMARK" or name not in self._members:
                        continue
                    if ev["type"] == "DELETED":
                        self._nodes.pop(name, None)
                    else:
                        self._nodes[name] = obj
            except ClientError:
                await asyncio.sleep(0.2)

    def _ips_of(self, node: str) -> PodIPs:
        ips = self._ips.get(node)
        cidr = ((self._nodes.get(node) or {}).get("spec") or {}).get("podCIDR")
        if ips is None or (cidr and ips.network != ipaddress.ip_network(cidr, strict=False)):
            if not cidr:
                index = self.names.index(node) % 256
                cidr = str(list(FALLBACK_RANGE.subnets(new_prefix=24))[index])
            ips = self._ips[node] = PodIPs(cidr)
        return ips

    def _choose(self, spec: dict) -> str | None:
        """Round-robin over live nodes that fit the pod's nodeSelector, required affinity and taints."""
        plain = not (spec.get("nodeSelector") or spec.get("affinity"))
        for _ in range(len(self.names)):
            n = next(self._next)
            if n in self.dead:
                continue
            node = self._nodes.get(n)
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
        await self._nodes_synced.wait()
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
                            node = (ev["object"].get("spec") or {}).get("nodeName")
                            if node in self._ips:
                                self._ips[node].release(m.get("uid", ""))
                        if ev["type"] in ("ADDED", "MODIFIED"):
                            queue.put_nowait(ev["object"])
                except ClientError:
                    await asyncio.sleep(0.2)

    async def _worker(self, queue: asyncio.Queue) -> None:
        while True:
            pod = await queue.get()
            with contextlib.suppress(ClientError):
                await self._handle(pod)

    @staticmethod
    async def _write_status(client: Client, pod: dict, status: dict) -> None:
        """An update of pods/status at the resourceVersion seen, read again on a conflict (a merge patch
        of status raced a controller's metadata write in test_workloads' adoption test)."""
        for _ in range(5):
            try:
                await client.update_status("pods", {**pod, "status": {**(pod.get("status") or {}), **status}})
                return
            except ClientError as e:
                if not e.conflict:
                    raise
            pod = await client.get("pods", pod["metadata"]["name"], pod["metadata"]["namespace"])
            if (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed"):
                return

    async def _handle(self, pod: dict) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        node = spec.get("nodeName")
        try:
            if not node:
                if self.bind and not meta.get("deletionTimestamp"):
                    target = self._choose(spec)
                    if target:
                        await self.client.bind(meta["namespace"], meta["name"], target)
                    else:
                        self._unbound[(meta["namespace"], meta["name"])] = pod
                return
            if node not in self._members or node in self.dead:
                return
            client = self.client_of(node)
            if meta.get("deletionTimestamp"):
                # the containers are stopped at once; the kubelet's status manager then deletes for good
                await client.delete("pods", meta["name"], meta["namespace"], grace_period=0,
                                    preconditions={"uid": meta.get("uid", "")})
                if self.on_written is not None:
                    self.on_written("delete", pod)
                return
            status = pod.get("status") or {}
            if self.make_ready and status.get("phase") not in ("Running", "Succeeded", "Failed"):
                host = next((a["address"] for a in ((self._nodes.get(node) or {}).get("status") or {})
                             .get("addresses") or [] if a.get("type") == "InternalIP"), "127.0.0.1")
                new = running_status(pod, self._ips_of(node).assign(meta.get("uid", "")), host, now_rfc3339())
                if self.on_written is not None:
                    self.on_written("status", pod)
                await self._write_status(client, pod, new)
        except ClientError as e:
            if not (e.not_found or e.conflict):
                raise

"""The Node object and its Lease (kubelet_node_status.go, nodelease): register, then keep both fresh.

Status is posted every `status_period` and whenever the readiness changes; the Lease
(nodeLeaseDurationSeconds, 40 s by default) is renewed every quarter of its duration, as kubelet's node lease
controller does. The Ready condition comes from the runtime's Status (RuntimeReady, NetworkReady) and the
PLEG's health; the node taints itself not-ready until they are all fine.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import socket
from collections.abc import Callable, Mapping
from typing import Any

from cri.client import RuntimeClient, is_unimplemented
from nodeagent.api.quantity import format_quantity
from nodeagent.client.rest import Client, ClientError
from nodeagent.clock import REAL_CLOCK, Clock
from nodeagent.kubelet import node_status, resources

log = logging.getLogger("nodeagent.kubelet.node")

KUBELET_VERSION = "v1.32.0-nodeagent"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION = 40  # kubelet's default nodeLeaseDurationSeconds
RENEW_INTERVAL_FRACTION = 0.25  # kubelet's renewIntervalFraction: 4 renewals in the Lease's duration


def host_ips() -> list[str]:
    """The node's InternalIP: the source address of the default route (no packet is sent)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 1))
        return [s.getsockname()[0]]
    except OSError:
        return ["127.0.0.1"]
    finally:
        s.close()


def _microtime(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeAgent:
    """Owns this node's Node and Lease objects."""

    def __init__(self, client: Client, cri: RuntimeClient, name: str, fs_path: str,
                 pleg_health: Callable[[], tuple[bool, str]], clock: Clock | None = None,
                 lease_duration: int = LEASE_DURATION, status_period: float = 10.0,
                 max_pods: int = node_status.DEFAULT_MAX_PODS, eviction: Any = None,
                 addresses: list[str] | None = None, system_reserved: Mapping[str, Any] | None = None,
                 kube_reserved: Mapping[str, Any] | None = None) -> None:
        self.client = client
        self.cri = cri
        self.name = name
        self.fs_path = fs_path
        self.pleg_health = pleg_health
        self.clock = clock or REAL_CLOCK
        self.lease_duration = lease_duration
        self.lease_period = lease_duration * RENEW_INTERVAL_FRACTION
        self.status_period = status_period
        self.max_pods = max_pods
        self.eviction = eviction  # EvictionManager: pressure conditions, taints, hard-threshold reservation
        self.system_reserved = dict(system_reserved or {})  # --system-reserved, taken off allocatable
        self.kube_reserved = dict(kube_reserved or {})  # --kube-reserved
        self.addresses = list(addresses) if addresses else host_ips()  # --node-ip, else detected
        self.capacity = node_status.machine_capacity(fs_path, max_pods)
        self.ready = False
        self.runtime_name = "unknown"
        self.runtime_version = ""
        self.changed = asyncio.Event()
        self.uid = ""
        self.kubelet_port = 0  # the Node API's port, published in status.daemonEndpoints
        self.pod_cidr = ""  # the Node's spec.podCIDR as last handed to the runtime
        self._network_ready = False  # the runtime's NetworkReady, as last read (kubelet's runtimeState)

    def memory_capacity(self) -> int:
        return int(resources._whole(resources._to_list(self.capacity).get("memory", 0)))

    def allocatable(self) -> dict[str, str]:
        hard = None
        if self.eviction is not None:
            from nodeagent.kubelet.eviction import hard_eviction_reservation

            hard = hard_eviction_reservation(self.eviction.thresholds, self.capacity)
        alloc = resources.node_allocatable(self.capacity, self.system_reserved, self.kube_reserved, hard)
        return {k: format_quantity(v,
                                   binary=k in ("memory", "ephemeral-storage") or k.startswith("hugepages"))
                for k, v in alloc.items()}

    async def _runtime_errors(self) -> list[str]:
        try:
            st = await self.cri.status()
        except Exception as e:
            self._network_ready = False
            return node_status.runtime_errors(False, False, "RuntimeDown", str(e))
        conds = {c.type: c for c in st.status.conditions}
        rt = conds.get("RuntimeReady")
        net = conds.get("NetworkReady")
        self._network_ready = bool(net and net.status)
        pleg_ok, pleg_msg = self.pleg_health()
        return node_status.runtime_errors(bool(rt and rt.status), bool(net and net.status),
                                          net.reason if net else "NetworkPluginNotReady",
                                          net.message if net else "", pleg_ok, pleg_msg)

    async def network_errors(self) -> list[str]:
        """kubelet's runtimeState.networkErrors(): why pods on the pod network cannot start yet. Once the
        runtime said its network is ready the answer is kept until the next status pass; until then the
        runtime is asked again, so pods start as soon as the CNI config appears."""
        if self._network_ready:
            return []
        errors = await self._runtime_errors()
        return [e for e in errors if e.startswith("container runtime network not ready")]

    async def register(self) -> None:
        v = await self.cri.version()
        self.runtime_name, self.runtime_version = v.runtime_name, v.runtime_version
        # the node name is the kubelet's --hostname-override: the hostname label carries it, so nodes that
        # share a kernel's hostname (a netns lab) are still told apart by topology (local PVs, spreading)
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": node_status.node_labels(self.name)},
                "spec": {"taints": [dict(node_status.NOT_READY_TAINT)]}}
        try:
            self.uid = (await self.client.create("nodes", node))["metadata"]["uid"]
            log.info("registered node %s", self.name)
        except ClientError as e:
            if not e.already_exists:
                raise
            self.uid = (await self.client.get("nodes", self.name))["metadata"]["uid"]
            log.info("node %s already registered", self.name)
        await self.post_status()

    async def post_status(self) -> None:
        errors = await self._runtime_errors()
        now = self.clock.now()
        cur = await self.client.get("nodes", self.name)
        old = {c["type"]: c for c in (cur.get("status") or {}).get("conditions") or []}
        ready = node_status.ready_condition(errors, now, old.get("Ready"))
        conds = []
        if self.eviction is not None:
            conds = self.eviction.node_conditions_status(old.values())
        conds.append(ready)
        status = {"capacity": self.capacity, "allocatable": self.allocatable(),
                  "conditions": conds,
                  "addresses": node_status.node_addresses(socket.gethostname(), self.addresses),
                  "nodeInfo": node_status.node_info(self.runtime_name, self.runtime_version, KUBELET_VERSION),
                  "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port}}}
        await self.client.patch("nodes", self.name, {"status": status}, subresource="status")
        await self._update_pod_cidr(cur)
        is_ready = not errors
        taints = node_status.node_taints((cur.get("spec") or {}).get("taints") or [], is_ready,
                                         self.eviction.taints() if self.eviction is not None else ())
        if taints != ((cur.get("spec") or {}).get("taints") or []):
            await self.client.patch("nodes", self.name, {"spec": {"taints": taints or None}})
        if is_ready != self.ready:
            log.info("node %s: %s", self.name, "Ready" if is_ready else f"NotReady ({'; '.join(errors)})")
        self.ready = is_ready

    async def _update_pod_cidr(self, node: dict[str, Any]) -> None:
        """Hand the runtime the podCIDR the node IPAM gave this node, as the kubelet does
        (UpdateRuntimeConfig); the pod network itself (the CNI config) follows it in the `podcidr`
        component."""
        cidr = (node.get("spec") or {}).get("podCIDR") or ""
        if not cidr or cidr == self.pod_cidr:
            return
        try:
            await self.cri.update_runtime_config(cidr)
        except Exception as e:
            if not is_unimplemented(e):
                log.warning("node %s: cannot hand podCIDR %s to the runtime: %s", self.name, cidr, e)
                return
        log.info("node %s: podCIDR %s", self.name, cidr)
        self.pod_cidr = cidr

    async def renew_lease(self) -> None:
        now = _microtime(self.clock.now())
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": self.lease_duration, "renewTime": now}
        try:
            await self.client.patch("leases", self.name, {"spec": spec}, namespace=LEASE_NAMESPACE)
        except ClientError as e:
            if not e.not_found:
                raise
            await self.client.create("leases", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                                "metadata": {"name": self.name, "namespace": LEASE_NAMESPACE},
                                                "spec": {**spec, "acquireTime": now}},
                                     namespace=LEASE_NAMESPACE)

    async def run(self) -> None:
        """Renew the Lease and post the status until cancelled; errors are logged and retried next period."""
        next_status = 0.0
        while True:
            try:
                await self.renew_lease()
            except Exception as e:
                log.warning("lease renewal failed: %s", e)
            if self.clock.now() >= next_status or not self.ready:
                try:
                    await self.post_status()
                    next_status = self.clock.now() + self.status_period
                except Exception as e:
                    log.warning("node status update failed: %s", e)
            await self.clock.sleep(self.lease_period if self.ready else 1.0)

"""The configurations of nodenet's four components, validated when they are built (`nodeagent up` /
`agent` / `server` build them from their flags and the instance's layout).

Node side: `cni` (the pod network's conflist and the CNI plugins' daemon), `podcidr` (the conflist from
the Node's spec.podCIDR), `nodenet` (routes to the other nodes' pods). Cluster side: `podnetwork` (the
backend and cluster CIDR stamped on every Node).
"""

from __future__ import annotations

import dataclasses
import ipaddress

from nodeagent.client.config import Credentials
from nodeagent.nodenet import annotations as ann
from nodeagent.nodenet.network import PodNetwork


@dataclasses.dataclass(frozen=True)
class CNIConfig:
    network: PodNetwork
    cgroup_root: str  # the kubelet's: its QoS tree goes with the bridge when no pod is left


@dataclasses.dataclass(frozen=True)
class PodCIDRConfig:
    network: PodNetwork  # with a subnet (--pod-subnet): nothing to adopt
    node_name: str
    credentials: Credentials


@dataclasses.dataclass(frozen=True)
class NodeNetConfig:
    node_name: str
    credentials: Credentials
    node_ip: str | None = None  # the underlay address; None: the source address towards the apiserver
    pod_subnet: str | None = None  # --pod-subnet: published for the other nodes' routes

    def __post_init__(self) -> None:
        try:
            if self.node_ip:
                ipaddress.ip_address(self.node_ip)
            if self.pod_subnet:
                ipaddress.ip_network(self.pod_subnet, strict=False)
        except ValueError as e:
            raise ValueError(f"nodenet: {e}") from None


@dataclasses.dataclass(frozen=True)
class PodNetworkConfig:
    kubeconfig: str  # the admin kubeconfig the apiserver writes
    backend: str = "host-gw"  # --pod-network
    cluster_cidr: str = "10.244.0.0/16"

    def __post_init__(self) -> None:
        if self.backend not in ann.MODES:
            raise ValueError(f"--pod-network {self.backend!r}: one of {', '.join(ann.MODES)}")
        try:
            ipaddress.ip_network(self.cluster_cidr, strict=False)
        except ValueError as e:
            raise ValueError(f"pod network cluster CIDR: {e}") from None

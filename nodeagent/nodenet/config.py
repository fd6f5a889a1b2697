"""The configurations of nodenet's four components, validated when they are built (`nodeagent up` /
`agent` / `server` build them from their flags and the instance's layout).

Node side: `cni` (the pod network's conflist and the CNI plugins' daemon), `podcidr` (the conflist from
the Node's spec.podCIDR), `nodenet` (routes to the other nodes' pods). Cluster side: `podnetwork` (the
backend and cluster CIDR stamped on every Node).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re

from nodeagent.client.config import Credentials
from nodeagent.nodenet import annotations as ann
from nodeagent.nodenet.birdconf import DEFAULT_AS
from nodeagent.nodenet.network import PodNetwork

NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


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
    bird_dir: str = ""  # bgp mode: BIRD's config, control socket and log (Layout.bird_dir)

    def __post_init__(self) -> None:
        try:
            if self.node_ip:
                ipaddress.ip_address(self.node_ip)
            if self.pod_subnet:
                ipaddress.ip_network(self.pod_subnet, strict=False)
        except ValueError as e:
            raise ValueError(f"nodenet: {e}") from None


@dataclasses.dataclass(frozen=True)
class BGPSettings:
    """The cluster's BGP settings (`--bgp-as`, `--bgp-route-reflectors`,
    `--bgp-advertise-service-cluster-ips`), stamped on every Node by the server in bgp mode."""

    asn: int = DEFAULT_AS
    route_reflectors: tuple[str, ...] = ()  # node names; none: node-to-node mesh
    service_cidrs: tuple[str, ...] = ()  # ClusterIP ranges announced to external peers

    def __post_init__(self) -> None:
        if not 1 <= self.asn <= 4294967295:
            raise ValueError(f"--bgp-as {self.asn}: an AS number is 1 to 4294967295")
        for name in self.route_reflectors:
            if not NODE_NAME.fullmatch(name):
                raise ValueError(f"--bgp-route-reflectors: {name!r} is not a node name (a DNS subdomain)")
        for c in self.service_cidrs:
            try:
                ipaddress.IPv4Network(c, strict=False)
            except ValueError as e:
                raise ValueError(f"--bgp-advertise-service-cluster-ips: {e}") from None


@dataclasses.dataclass(frozen=True)
class PodNetworkConfig:
    kubeconfig: str  # the admin kubeconfig the apiserver writes
    backend: str = "host-gw"  # --pod-network
    cluster_cidr: str = "10.244.0.0/16"
    bgp: BGPSettings | None = None  # bgp mode only

    def __post_init__(self) -> None:
        if self.backend not in ann.MODES:
            raise ValueError(f"--pod-network {self.backend!r}: one of {', '.join(ann.MODES)}")
        if self.bgp is not None and self.backend != "bgp":
            raise ValueError(f"--bgp-as, --bgp-route-reflectors and --bgp-advertise-service-cluster-ips "
                             f"need --pod-network bgp (not {self.backend})")
        try:
            ipaddress.ip_network(self.cluster_cidr, strict=False)
        except ValueError as e:
            raise ValueError(f"pod network cluster CIDR: {e}") from None

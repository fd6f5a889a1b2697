"""Names and addresses of one lab, all derived from its directory so several labs never collide."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

POD_CLUSTER_CIDR = "10.244.0.0/16"
API_PORT = 6443


def lab_tag(lab_dir: str | Path) -> str:
    return hashlib.sha256(str(Path(lab_dir).resolve()).encode()).hexdigest()[:6]


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    index: int  # 1-based
    name: str
    netns: str
    host_veth: str  # host end, enslaved to the underlay bridge; the node's end is eth0
    address: str  # underlay address (the agent's --node-ip)
    data_dir: str  # pod subnet: the node's spec.podCIDR, from the server's node IPAM (POD_CLUSTER_CIDR)


@dataclasses.dataclass(frozen=True)
class Topology:
    lab_dir: str
    tag: str
    bridge: str  # underlay bridge on the host
    subnet_prefix: str  # "172.30.N" of the underlay /24
    nodes: tuple[NodeSpec, ...]

    @property
    def host_address(self) -> str:
        return f"{self.subnet_prefix}.254"

    @property
    def lb_pool(self) -> str:
        """The LoadBalancer addresses the lab's server hands out: a /28 of the node network (above its
        nodes)."""
        return f"{self.subnet_prefix}.224/28"

    @property
    def server_address(self) -> str:
        return self.nodes[0].address

    @property
    def server_url(self) -> str:
        return f"https://{self.server_address}:{API_PORT}"

    @property
    def server_dir(self) -> str:
        return str(Path(self.lab_dir, "server"))

    @property
    def kubeconfig(self) -> str:
        return str(Path(self.server_dir, "admin.kubeconfig"))


def topology(lab_dir: str | Path, nodes: int) -> Topology:
    """N nodes on 172.30.<t>.0/24 (t from the dir's tag), names ≤ 15 chars; each node's pod subnet is the
    podCIDR the server's node IPAM gives it out of POD_CLUSTER_CIDR when it registers."""
    if not 1 <= nodes <= 200:
        raise ValueError("--nodes: 1 to 200")
    lab_dir = str(Path(lab_dir).resolve())
    tag = lab_tag(lab_dir)
    prefix = f"172.30.{int(tag[:2], 16)}"
    specs = tuple(NodeSpec(i, f"node{i}", f"nalab-{tag}-{i}", f"nl{tag}h{i}", f"{prefix}.{i}",
                           str(Path(lab_dir, f"node{i}"))) for i in range(1, nodes + 1))
    return Topology(lab_dir, tag, f"nlb{tag}", prefix, specs)

"""Pure rendering of one node's BIRD 2 configuration from the cluster view, as Calico's confd templates do
(`bird.cfg.template`, `bird_ipam.cfg.template`): no process, no kernel here, so every topology is
unit-testable and the text is checked by `bird -p` before it is loaded.

What a node's BIRD does:
- router id = the node's underlay address; one local AS for the whole cluster (`--bgp-as`);
- its spec.podCIDR as a static blackhole route (Calico's block aggregate): exported to the peers, and into the
  kernel under the bridge's connected route (a higher metric), so an unassigned pod address is dropped here
  instead of following the default route;
- iBGP: one session per other node (node-to-node mesh, named `Mesh_<ip>` as Calico names them), or, with
  route reflectors, every node peers with the reflectors only and a reflector treats the others as
  `rr client`s;
- the other nodes' pod CIDRs learned over iBGP go into the kernel's main table with the owner as next hop
  (`gateway recursive`, resolved through the connected underlay);
- external peers (BGPPeer objects): eBGP sessions (`Global_<ip>` or `Node_<ip>`, Calico's names) that get
  this node's pod CIDR, the other pod CIDRs it knows with its AS prepended once more (so the owner's direct
  announcement wins on the router), the Service ClusterIP ranges (`--bgp-advertise-service-cluster-ips`) and
  the LoadBalancer addresses handed in (`announce`); nothing a peer sends for the cluster's own ranges is
  accepted.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable

DEFAULT_AS = 64512  # Calico's default node AS (a private AS)
HOLD_TIME = 9  # seconds: a node that vanishes without closing its session is dropped within this
KEEPALIVE_TIME = 3
KERNEL_METRIC = 32  # BIRD's default kernel metric, above the bridge's connected route (0)
SCAN_TIME = 2  # Calico's kernel/device scan time


@dataclasses.dataclass(frozen=True)
class NodePeer:
    """Another node of the cluster as BGP sees it."""

    name: str
    ip: str


@dataclasses.dataclass(frozen=True)
class ExternalPeer:
    """A router outside the cluster (one BGPPeer object selecting this node)."""

    name: str  # the BGPPeer's name
    ip: str
    asn: int
    node_specific: bool = False  # selected by a nodeSelector: Calico's Node_<ip>, else Global_<ip>
    port: int = 179


@dataclasses.dataclass(frozen=True)
class BirdSettings:
    """Everything one node's BIRD configuration is rendered from."""

    node: str
    router_id: str  # the node's underlay address
    asn: int
    cluster_cidr: str  # the pod range: only routes inside it are imported into the kernel
    pod_cidr: str | None  # this node's spec.podCIDR (None: not assigned yet; nothing announced)
    nodes: tuple[NodePeer, ...] = ()  # the other nodes
    reflectors: tuple[str, ...] = ()  # node names; empty: full mesh
    external: tuple[ExternalPeer, ...] = ()
    service_cidrs: tuple[str, ...] = ()  # ClusterIP ranges announced to external peers
    announce: tuple[str, ...] = ()  # further addresses (LoadBalancer IPs) announced to external peers
    log_file: str | None = None

    def __post_init__(self) -> None:
        ipaddress.IPv4Address(self.router_id)
        if not 1 <= self.asn <= 4294967295:
            raise ValueError(f"AS number {self.asn}: 1 to 4294967295")
        for c in (self.cluster_cidr, *( [self.pod_cidr] if self.pod_cidr else []), *self.service_cidrs,
                  *self.announce):
            ipaddress.IPv4Network(c, strict=False)

    @property
    def is_reflector(self) -> bool:
        return self.node in self.reflectors


def protocol_id(ip: str) -> str:
    """172.30.1.2 → 172_30_1_2 (Calico's protocol name suffix)."""
    return ip.replace(".", "_").replace(":", "_")


def mesh_protocol(ip: str) -> str:
    return f"Mesh_{protocol_id(ip)}"


def external_protocol(peer: ExternalPeer) -> str:
    base = f"{'Node' if peer.node_specific else 'Global'}_{protocol_id(peer.ip)}"
    return base if peer.port == 179 else f"{base}_port_{peer.port}"


def _net(cidr: str) -> str:
    return str(ipaddress.ip_network(cidr, strict=False))


def _prefix_set(cidrs: Iterable[str], more_specifics: bool = True) -> str:
    """A BIRD prefix set: each network and (with more_specifics) everything inside it."""
    items = sorted({_net(c) for c in cidrs})
    return "[ " + ", ".join(f"{c}+" if more_specifics else c for c in items) + " ]"


def node_sessions(s: BirdSettings) -> list[tuple[NodePeer, bool]]:
    """(peer, peer is our rr client) for every iBGP session this node holds."""
    others = sorted((p for p in s.nodes if p.ip != s.router_id and p.name != s.node),
                    key=lambda p: ipaddress.IPv4Address(p.ip))
    if not s.reflectors:
        return [(p, False) for p in others]
    if s.is_reflector:
        return [(p, p.name not in s.reflectors) for p in others]
    return [(p, False) for p in others if p.name in s.reflectors]


def render(s: BirdSettings) -> str:
    """The whole bird.conf for one node."""
    out: list[str] = [
        f"# BIRD configuration of node {s.node}, rendered by nodeagent from the Node and BGPPeer objects.",
        "# Do not edit: it is rewritten and reloaded (birdc configure) when the cluster changes.",
    ]
    if s.log_file:
        out.append(f'log "{s.log_file}" all;')
    out += [f"router id {s.router_id};", "",
            f"define CLUSTER_AS = {s.asn};",
            ""]
    pods = f"[ {_net(s.cluster_cidr)}+ ]"  # the pod range and every subnet in it

    # the filters: the kernel gets the pod routes learned from the other nodes and our own aggregate
    out += [
        "# Which routes the kernel's main table gets: the other nodes' pod CIDRs (next hop: the owner)",
        "# and this node's own blackhole aggregate.",
        "filter kernel_export {",
        '  if proto = "pod_cidr" then accept;',
        f"  if source = RTS_BGP && net ~ {pods} then accept;",
        "  reject;",
        "}", "",
        "# What the other nodes get: our pod CIDR; a route reflector also reflects the ones it learned",
        "# (BIRD never passes iBGP routes on to iBGP peers that are not its rr clients).",
        "filter nodes_export {",
        '  if proto = "pod_cidr" then accept;',
        f"  if source = RTS_BGP && net ~ {pods} then accept;",
        "  reject;",
        "}", "",
        "filter nodes_import {",
    ]
    if s.pod_cidr:
        out.append(f"  if net ~ [ {_net(s.pod_cidr)}+ ] then reject;  # our own subnet is never routed away")
    out += [f"  if net ~ {pods} then accept;", "  reject;", "}", ""]
    if s.external:
        service = sorted({_net(c) for c in (*s.service_cidrs, *s.announce)})
        out += [
            "# What routers outside the cluster get: our pod CIDR, the Service ranges and addresses we",
            "# announce, and the other pod CIDRs we know with our AS once more (their owner's own",
            "# announcement is the shorter path).",
            "filter external_export {",
            '  if proto = "pod_cidr" || proto = "services" then accept;',
            f"  if source = RTS_BGP && net ~ {pods} then {{",
            "    bgp_path.prepend(CLUSTER_AS);",
            "    accept;",
            "  }",
            "  reject;",
            "}", "",
            "# Nothing a router sends for the cluster's own ranges is taken.",
            "filter external_import {",
            f"  if net ~ {pods} then reject;",
        ]
        if service:
            out.append(f"  if net ~ {_prefix_set(service)} then reject;")
        out += ["  accept;", "}", ""]

    out += [
        "protocol device {", f"  scan time {SCAN_TIME};", "}", "",
        "# Connected networks resolve the BGP next hops (gateway recursive); the pod bridge's own subnet",
        "# is not one of them: the pod_cidr aggregate stands for it.",
        "protocol direct {", "  ipv4 {", f"    import where net !~ {pods};", "  };", "}", "",
        "protocol kernel {",
        "  ipv4 {", f"    import where net !~ {pods};", "    export filter kernel_export;", "  };",
        "  learn;  # alien routes (the default route) also resolve next hops",
        f"  scan time {SCAN_TIME};",
        f"  metric {KERNEL_METRIC};",
        "  merge paths on;  # ECMP where several equal routes exist",
        "}", "",
    ]
    if s.pod_cidr:
        out += ["# This node's spec.podCIDR: announced to the peers, a blackhole in the kernel under the",
                "# bridge's connected route.",
                "protocol static pod_cidr {", "  ipv4;", f"  route {_net(s.pod_cidr)} blackhole;", "}", ""]
    service_routes = sorted({_net(c) for c in (*s.service_cidrs, *s.announce)})
    if service_routes and s.external:
        out += ["# Service ranges announced to external peers (never put into the kernel).",
                "protocol static services {", "  ipv4;"]
        out += [f"  route {c} blackhole;" for c in service_routes]
        out += ["}", ""]

    out += [
        "template bgp nodes {",
        f"  local {s.router_id} as CLUSTER_AS;",
        "  multihop;",
        f"  hold time {HOLD_TIME};",
        f"  keepalive time {KEEPALIVE_TIME};",
        "  connect delay time 1;",
        "  connect retry time 3;",
        "  error wait time 5, 60;",
        "  ipv4 {",
        "    gateway recursive;",
        "    import filter nodes_import;",
        "    export filter nodes_export;",
        "  };",
        "}", "",
    ]
    sessions = node_sessions(s)
    if not sessions:
        out.append("# No other node to peer with.")
    elif s.reflectors:
        role = "a route reflector" if s.is_reflector else "a client of the route reflectors"
        out.append(f"# Route reflectors: {', '.join(s.reflectors)}; this node is {role}.")
    else:
        out.append("# Node-to-node mesh.")
    me = ipaddress.IPv4Address(s.router_id)
    for peer, client in sessions:
        out += [f"protocol bgp {mesh_protocol(peer.ip)} from nodes {{",
                f'  description "node {peer.name}";',
                f"  neighbor {peer.ip} as CLUSTER_AS;"]
        if client:
            out.append("  rr client;")
        elif not s.reflectors and ipaddress.IPv4Address(peer.ip) > me:
            # one side opens the connection (Calico's unidirectional mesh): no collision, no flap
            out.append("  passive on;  # the peer connects to us")
        out += ["}", ""]

    for e in sorted(s.external, key=lambda e: (ipaddress.IPv4Address(e.ip), e.port)):
        if e.ip == s.router_id:
            out += [f"# BGPPeer {e.name}: skipping ourselves ({e.ip})", ""]
            continue
        ebgp = e.asn != s.asn
        out += [f"protocol bgp {external_protocol(e)} {{",
                f'  description "BGPPeer {e.name}";',
                f"  local {s.router_id} as CLUSTER_AS;",
                f"  neighbor {e.ip} port {e.port} as {e.asn};"]
        if not ebgp:
            out.append("  multihop;")
        out += [f"  hold time {HOLD_TIME};", f"  keepalive time {KEEPALIVE_TIME};",
                "  connect delay time 1;", "  connect retry time 3;", "  error wait time 5, 60;",
                "  ipv4 {", "    import filter external_import;", "    export filter external_export;"]
        if not ebgp:
            out.append("    next hop self;")
        out += ["  };", "}", ""]
    return "\n".join(out).rstrip() + "\n"

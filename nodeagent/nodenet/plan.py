"""Pure planning: from the Nodes' annotations to the routes, FDB and neighbour entries one node wants.

No kernel here: `desired()` turns the cluster view into a `Plan`, `diff()` compares it with what the kernel
holds (read by `dataplane`) and says what to add and delete, so the whole policy is unit-testable.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.nodenet import annotations as ann

VXLAN_DEVICE = "nodenet.1"  # flannel.1's counterpart: VNI 1
IPIP_DEVICE = "tunl0"  # the kernel's fallback ipip device, as Calico uses it
VXLAN_VNI = 1
VXLAN_PORT = 8472  # the Linux kernel's historical default, flannel's too
VXLAN_OVERHEAD = 50  # outer IPv4 20 + UDP 8 + VXLAN 8 + inner Ethernet 14
IPIP_OVERHEAD = 20  # outer IPv4 header


@dataclasses.dataclass(frozen=True)
class Peer:
    """What one node publishes about itself."""

    name: str
    public_ip: str
    pod_cidr: str
    vtep_mac: str | None = None


@dataclasses.dataclass(frozen=True)
class Route:
    dst: str
    gateway: str
    device: str | None  # None: whatever reaches the gateway (host-gw)
    onlink: bool = False


@dataclasses.dataclass(frozen=True)
class Fdb:
    mac: str
    dst: str  # remote underlay address


@dataclasses.dataclass(frozen=True)
class Neigh:
    ip: str  # remote VTEP address (its pod subnet's network address)
    mac: str


@dataclasses.dataclass(frozen=True)
class Plan:
    mode: str
    routes: frozenset[Route]
    fdb: frozenset[Fdb] = frozenset()
    neigh: frozenset[Neigh] = frozenset()


def peer_of(node: Mapping[str, Any]) -> Peer | None:
    """The node's published data, or None while it has not published (yet) what the mode needs. Its pod
    subnet: the --pod-subnet override it announced, else its spec.podCIDR (or first spec.podCIDRs)."""
    meta = node.get("metadata") or {}
    a = meta.get("annotations") or {}
    ip = a.get(ann.PUBLIC_IP)
    spec = node.get("spec") or {}
    cidr = a.get(ann.POD_CIDR) or spec.get("podCIDR") or next(iter(spec.get("podCIDRs") or []), None)
    if not ip or not cidr:
        return None
    try:
        ipaddress.ip_address(ip)
        ipaddress.ip_network(cidr)
    except ValueError:
        return None
    return Peer(meta.get("name", ""), ip, str(ipaddress.ip_network(cidr)), a.get(ann.VTEP_MAC) or None)


def tunnel_address(pod_cidr: str) -> str:
    """A node's tunnel-device address: its pod subnet's network address (flannel's VTEP IP scheme)."""
    return str(ipaddress.ip_network(pod_cidr).network_address)


def device_for(mode: str) -> str | None:
    return {"vxlan": VXLAN_DEVICE, "ipip": IPIP_DEVICE}.get(mode)


def mtu_for(mode: str, underlay_mtu: int) -> int | None:
    return {"vxlan": underlay_mtu - VXLAN_OVERHEAD, "ipip": underlay_mtu - IPIP_OVERHEAD}.get(mode)


def desired(mode: str, me: str, nodes: Iterable[Mapping[str, Any]]) -> Plan:
    """Everything this node should hold for the other nodes in `nodes` (itself and half-published nodes
    skipped).

    host-gw: `podCIDR via publicIP`; ipip: `podCIDR via publicIP dev tunl0 onlink`; vxlan: `podCIDR via
    vtepIP dev nodenet.1 onlink` plus the neighbour (vtepIP → vtepMAC) and FDB (vtepMAC → publicIP) entries;
    bgp: nothing (BIRD's kernel protocol owns those routes).
    """
    if mode not in ann.MODES:
        raise ValueError(f"unknown pod network mode {mode!r} (one of {', '.join(ann.MODES)})")
    if mode == "bgp":
        return Plan(mode, frozenset())  # BIRD puts the routes in (nodenet.bgp); none of ours
    mine = None
    peers = []
    for n in nodes:
        p = peer_of(n)
        if p is None:
            continue
        if p.name == me:
            mine = p
        else:
            peers.append(p)
    routes, fdb, neigh = set(), set(), set()
    for p in peers:
        if mine is not None \
                and ipaddress.ip_network(p.pod_cidr).overlaps(ipaddress.ip_network(mine.pod_cidr)):
            continue  # never route our own subnet away
        if mode == "host-gw":
            routes.add(Route(p.pod_cidr, p.public_ip, None))
        elif mode == "ipip":
            routes.add(Route(p.pod_cidr, p.public_ip, IPIP_DEVICE, onlink=True))
        else:
            if not p.vtep_mac:
                continue
            vtep = tunnel_address(p.pod_cidr)
            routes.add(Route(p.pod_cidr, vtep, VXLAN_DEVICE, onlink=True))
            neigh.add(Neigh(vtep, p.vtep_mac.lower()))
            fdb.add(Fdb(p.vtep_mac.lower(), p.public_ip))
    return Plan(mode, frozenset(routes), frozenset(fdb), frozenset(neigh))


@dataclasses.dataclass
class Changes:
    add_routes: list[Route] = dataclasses.field(default_factory=list)
    del_routes: list[Route] = dataclasses.field(default_factory=list)
    add_fdb: list[Fdb] = dataclasses.field(default_factory=list)
    del_fdb: list[Fdb] = dataclasses.field(default_factory=list)
    add_neigh: list[Neigh] = dataclasses.field(default_factory=list)
    del_neigh: list[Neigh] = dataclasses.field(default_factory=list)

    def empty(self) -> bool:
        return not any(dataclasses.astuple(self))


def diff(want: Plan, have: Plan) -> Changes:
    """What to do so that `have` (the kernel's entries of ours) becomes `want`; deletions first, sorted."""
    def k(x: Any) -> str:
        return repr(x)

    c = Changes()
    c.del_routes = sorted(have.routes - want.routes, key=k)
    c.add_routes = sorted(want.routes - have.routes, key=k)
    c.del_fdb = sorted(have.fdb - want.fdb, key=k)
    c.add_fdb = sorted(want.fdb - have.fdb, key=k)
    c.del_neigh = sorted(have.neigh - want.neigh, key=k)
    c.add_neigh = sorted(want.neigh - have.neigh, key=k)
    return c


def my_annotations(mode: str, public_ip: str, pod_cidr: str, vtep_mac: str | None,
                   spec_cidr: str | None = None) -> dict[str, str | None]:
    """What this node publishes on its own Node (a merge patch: None removes a stale value). Its pod subnet
    is announced only when it differs from spec.podCIDR (a --pod-subnet override): the others route to
    spec.podCIDR otherwise."""
    mine = str(ipaddress.ip_network(pod_cidr))
    spec = str(ipaddress.ip_network(spec_cidr, strict=False)) if spec_cidr else None
    return {ann.PUBLIC_IP: public_ip, ann.POD_CIDR: None if mine == spec else mine,
            ann.VTEP_MAC: vtep_mac if mode == "vxlan" else None}

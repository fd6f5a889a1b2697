"""Pure planning for the ipvs mode: Service ports → virtual servers, bound addresses and ipset entries.

kube-proxy's ipvs layout: every Service IP is bound to the dummy `kube-ipvs0`
(so the node accepts it), one IPVS virtual server per VIP:port (and per node
IP:nodePort) with the endpoints as masqueraded real servers, and ipsets that a
handful of fixed iptables rules match for masquerading (KUBE-CLUSTER-IP for
off-cluster sources, KUBE-LOOP-BACK for hairpin, KUBE-NODE-PORT-*).
`diff` turns current and desired into the minimal ordered operations.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping

from netproxy.model import Endpoint, ServicePort, categorize
from netproxy.proxier import NodeConfig

DUMMY = "kube-ipvs0"
SCHEDULERS = ("rr", "wrr", "sh", "lc", "wlc", "dh", "sed", "nq")

VSKey = tuple[str, str, int]  # (ip, protocol, port)


@dataclasses.dataclass(frozen=True)
class VirtualServer:
    scheduler: str = "rr"
    persistence: int = 0  # seconds; ClientIP affinity
    dests: frozenset[tuple[str, int, int]] = frozenset()  # (ip, port, weight)


@dataclasses.dataclass
class Desired:
    services: dict[VSKey, VirtualServer] = dataclasses.field(default_factory=dict)
    addresses: set[str] = dataclasses.field(default_factory=set)  # bound to kube-ipvs0
    ipsets: dict[str, set[str]] = dataclasses.field(default_factory=dict)  # ipset name -> entries


IPSETS = {
    "KUBE-CLUSTER-IP": "hash:ip,port",
    "KUBE-LOOP-BACK": "hash:ip,port,ip",
    "KUBE-EXTERNAL-IP": "hash:ip,port",
    "KUBE-LOAD-BALANCER": "hash:ip,port",
    "KUBE-LOAD-BALANCER-FW": "hash:ip,port",  # LB IP:port with loadBalancerSourceRanges
    "KUBE-LOAD-BALANCER-SOURCE-CIDR": "hash:ip,port,net",  # LB IP:port, allowed source range
    "KUBE-LOAD-BALANCER-SOURCE-IP": "hash:ip,port,ip",  # LB IP:port, LB IP (the node's own hairpin)
    "KUBE-NODE-PORT-TCP": "bitmap:port",
    "KUBE-NODE-PORT-UDP": "bitmap:port",
    "KUBE-NODE-PORT-LOCAL-TCP": "bitmap:port",
    "KUBE-NODE-PORT-LOCAL-UDP": "bitmap:port",
}


def plan(services: Mapping, endpoints: Mapping, node: NodeConfig, scheduler: str = "rr") -> Desired:
    """The whole desired IPVS state for these Service ports."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown IPVS scheduler {scheduler!r}")
    d = Desired(ipsets={name: set() for name in IPSETS})
    for spn, sp in services.items():
        add_port(d, sp, endpoints.get(spn, ()), node, scheduler)
    return d


def _vs(sp: ServicePort, eps: Iterable[Endpoint], scheduler: str) -> VirtualServer:
    return VirtualServer(scheduler, sp.affinity_timeout, frozenset((e.ip, e.port, 1) for e in eps))


def add_port(d: Desired, sp: ServicePort, endpoints: Iterable[Endpoint], node: NodeConfig,
             scheduler: str) -> None:
    if sp.cluster_ip is None:
        return
    sel = categorize(sp, endpoints, node.node_name)
    proto = sp.protocol.lower()
    # No virtual server without endpoints: the VIP stays bound to kube-ipvs0, so the node's own
    # stack answers with a TCP RST / ICMP port unreachable, an immediate reject (a VS without
    # destinations would silently drop).
    if sel.cluster:
        d.services[(sp.cluster_ip, sp.protocol, sp.port)] = _vs(sp, sel.cluster, scheduler)
    d.addresses.add(sp.cluster_ip)
    d.ipsets["KUBE-CLUSTER-IP"].add(f"{sp.cluster_ip},{proto}:{sp.port}")
    for ep in sel.all_reachable:
        d.ipsets["KUBE-LOOP-BACK"].add(f"{ep.ip},{proto}:{ep.port},{ep.ip}")
    external = sel.local if sp.uses_local_external else sel.cluster
    for ip in sp.external_ips:
        if external:
            d.services[(ip, sp.protocol, sp.port)] = _vs(sp, external, scheduler)
        d.addresses.add(ip)
        d.ipsets["KUBE-EXTERNAL-IP"].add(f"{ip},{proto}:{sp.port}")
    for ip in sp.load_balancer_ips:
        if external:
            d.services[(ip, sp.protocol, sp.port)] = _vs(sp, external, scheduler)
        d.addresses.add(ip)
        d.ipsets["KUBE-LOAD-BALANCER"].add(f"{ip},{proto}:{sp.port}")
        if sp.source_ranges:
            d.ipsets["KUBE-LOAD-BALANCER-FW"].add(f"{ip},{proto}:{sp.port}")
            for cidr in sp.source_ranges:
                d.ipsets["KUBE-LOAD-BALANCER-SOURCE-CIDR"].add(f"{ip},{proto}:{sp.port},{cidr}")
                if any(ipaddress.ip_address(n) in ipaddress.ip_network(cidr) for n in node.node_ips):
                    d.ipsets["KUBE-LOAD-BALANCER-SOURCE-IP"].add(f"{ip},{proto}:{sp.port},{ip}")
    if sp.node_port and sp.protocol in ("TCP", "UDP"):
        for ip in node.node_ips if external else ():
            d.services[(ip, sp.protocol, sp.node_port)] = _vs(sp, external, scheduler)
        d.ipsets[f"KUBE-NODE-PORT-{sp.protocol}"].add(str(sp.node_port))
        if sp.uses_local_external:
            d.ipsets[f"KUBE-NODE-PORT-LOCAL-{sp.protocol}"].add(str(sp.node_port))


Op = tuple  # ("add-vs"|"edit-vs"|"del-vs", key, vs) | ("add-dest"|"del-dest", key, dest) | ...


def diff(current: Desired, desired: Desired) -> list[Op]:
    """Ordered operations: bind addresses, add/edit services and destinations, then remove stale ones."""
    ops: list[Op] = []
    for ip in sorted(desired.addresses - current.addresses):
        ops.append(("add-addr", ip))
    for key, vs in sorted(desired.services.items()):
        old = current.services.get(key)
        if old is None:
            ops.append(("add-vs", key, vs))
            ops.extend(("add-dest", key, dst) for dst in sorted(vs.dests))
            continue
        if (old.scheduler, old.persistence) != (vs.scheduler, vs.persistence):
            ops.append(("edit-vs", key, vs))
        ops.extend(("add-dest", key, dst) for dst in sorted(vs.dests - old.dests))
        ops.extend(("del-dest", key, dst) for dst in sorted(old.dests - vs.dests))
    for key in sorted(current.services.keys() - desired.services.keys()):
        ops.append(("del-vs", key, current.services[key]))
    for name in sorted(desired.ipsets.keys() | current.ipsets.keys()):
        now, want = current.ipsets.get(name, set()), desired.ipsets.get(name, set())
        ops.extend(("add-entry", name, e) for e in sorted(want - now))
        ops.extend(("del-entry", name, e) for e in sorted(now - want))
    for ip in sorted(current.addresses - desired.addresses):
        ops.append(("del-addr", ip))
    return ops


FILTER_CHAINS = ("KUBE-PROXY-FIREWALL", "KUBE-SOURCE-RANGES-FIREWALL")
NAT_CHAINS = ("KUBE-SERVICES", "KUBE-POSTROUTING", "KUBE-MARK-MASQ", "KUBE-NODE-PORT", "KUBE-LOAD-BALANCER")


def iptables_rules(node: NodeConfig) -> str:
    """The fixed nat rules of ipvs mode (iptables-restore --noflush input): masquerade by ipset match."""
    mark = f"{node.masq_mark:#x}"
    cidr = f"! -s {node.cluster_cidr} " if node.cluster_cidr else ""
    return "\n".join([
        "*nat",
        *(f":{chain} - [0:0]" for chain in NAT_CHAINS),
        f"-A KUBE-MARK-MASQ -j MARK --or-mark {mark}",
        "-A KUBE-POSTROUTING -m comment --comment \"Kubernetes endpoints dst ip:port, source ip for solving "
        "hairpin purpose\" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE",
        f"-A KUBE-POSTROUTING -m mark ! --mark {mark}/{mark} -j RETURN",
        f"-A KUBE-POSTROUTING -j MARK --xor-mark {mark}",
        "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" "
        "-j MASQUERADE --random-fully",
        f"-A KUBE-SERVICES {cidr}-m comment --comment \"Kubernetes service cluster ip + port for masquerade "
        f"purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ",
        "-A KUBE-SERVICES -m comment --comment \"Kubernetes service external ip + port for masquerade\" "
        "-m set --match-set KUBE-EXTERNAL-IP dst,dst -j KUBE-MARK-MASQ",
        "-A KUBE-SERVICES -m set --match-set KUBE-LOAD-BALANCER dst,dst -j KUBE-LOAD-BALANCER",
        "-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ",
        "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT",
        "-A KUBE-NODE-PORT -p tcp -m set --match-set KUBE-NODE-PORT-LOCAL-TCP dst -j RETURN",
        "-A KUBE-NODE-PORT -p udp -m set --match-set KUBE-NODE-PORT-LOCAL-UDP dst -j RETURN",
        "-A KUBE-NODE-PORT -p tcp -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ",
        "-A KUBE-NODE-PORT -p udp -m set --match-set KUBE-NODE-PORT-UDP dst -j KUBE-MARK-MASQ",
        "COMMIT",
        # loadBalancerSourceRanges, before IPVS (LOCAL_IN, after filter INPUT) rewrites the destination
        "*filter",
        *(f":{chain} - [0:0]" for chain in FILTER_CHAINS),
        "-A KUBE-PROXY-FIREWALL -m comment --comment \"Kubernetes service load balancer ip + port for load "
        "balancer with sourceRange\" -m set --match-set KUBE-LOAD-BALANCER-FW dst,dst "
        "-j KUBE-SOURCE-RANGES-FIREWALL",
        "-A KUBE-SOURCE-RANGES-FIREWALL -m set --match-set KUBE-LOAD-BALANCER-SOURCE-CIDR dst,dst,src "
        "-j RETURN",
        "-A KUBE-SOURCE-RANGES-FIREWALL -m set --match-set KUBE-LOAD-BALANCER-SOURCE-IP dst,dst,src "
        "-j RETURN",
        "-A KUBE-SOURCE-RANGES-FIREWALL -j DROP",
        "COMMIT", ""])

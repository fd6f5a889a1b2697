"""Pure planning of the nftables layout (kube-proxy's nftables mode, IPv4, one `ip` table).

    table ip kube-proxy
      set service-ips-<n>-endpoints  ipv4_addr . inet_proto . inet_service
                              ("picked" ClusterIP ports, n = 1..16)
      map service-endpoints   vip . proto . port . (numgen random mod n) : ip . port
                              (their endpoints, slot i)
      chain endpoint-pick-<n> masquerade mark, dnat to daddr . proto . dport . numgen random mod n map @…
      set hairpin-endpoints   ip saddr . ip daddr   (endpoint . endpoint: masqueraded after DNAT to itself)
      set service-nodeports-<n>-endpoints / map nodeport-endpoints / chain nodeport-pick-<n>
                              the same for a picked port's NodePort (Cluster policy: always masqueraded)
      chain nodeports         reached for local destination addresses: the NodePort lookups
      map service-ips         ipv4_addr . inet_proto . inet_service : verdict
                              (other ports: per-Service chains)
      map service-nodeports   inet_proto . inet_service : verdict
      set no-endpoint-services / no-endpoint-nodeports            → reject
      set no-local-endpoint-services / no-local-endpoint-nodeports → drop (Local policy, none local)
      chain services          the dispatch lookups
      chain service-<h>-ns/name/proto/port      masquerade mark, then one rule per endpoint:
                                                numgen random mod (N-i) == 0 goto endpoint-i
      chain external-<h>-…    / local-<h>-…     external traffic (Cluster / Local policy)
      chain firewall-<h>-…    loadBalancerSourceRanges: the allowed sources go on to external-, others drop
      chain endpoint-<h>-…__ip/port            hairpin mark, affinity update, dnat
      set affinity-<h>-…      ClientIP affinity (dynamic, timeout)

A "picked" port (a ClusterIP or NodePort port without affinity, external/LB IPs
or Local external policy, with 1..16 endpoints: the common case) owns no chain and no
rule: it is only set and map elements, so
adding, changing or deleting it never adds a rule or a jump. That matters because
the kernel (6.1 … 6.18) re-validates the WHOLE table on commit whenever a batch adds
a rule with an expression that has a validate hook (immediate jump/goto, nat,
masq, reject, fib, meta set, lookup…) or a verdict-map element with jump/goto
(nf_tables_newrule / nft_add_set_elem set validate_state NEED; nf_tables_validate
then walks every base chain's reachable rules): ~60 ms at 10k Services, whatever
the change. Data-map and plain-set elements skip it. Ports needing per-Service
logic (affinity, external / LB IPs, Local external policy, more than 16 endpoints) keep
kube-proxy's chain layout below and pay that validation when they change.

Rules are described as small tuples so plans compare cheaply; `encode.py` turns
them into netlink expressions. Endpoint choice is iptables' statistic cascade in
numgen form (independent draws with odds 1/N, 1/(N-1), … give a uniform pick)
instead of kube-proxy's anonymous `numgen … vmap {…}` per Service: the kernel finds
sets by walking lists (by name, and anonymous ones through the whole transaction)
and re-validates a shared verdict map from every chain that looks it up, so both
made a 10k-Service load quadratic (33 s and 56 s measured); plain rules stay linear.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable

from netproxy.hashing import hash16
from netproxy.model import Endpoint, ServicePort, ServicePortName, categorize
from netproxy.proxier import NodeConfig

SERVICE_IPS, SERVICE_NODEPORTS = "service-ips", "service-nodeports"
NO_EP_SERVICES, NO_EP_NODEPORTS = "no-endpoint-services", "no-endpoint-nodeports"
NO_LOCAL_SERVICES, NO_LOCAL_NODEPORTS = "no-local-endpoint-services", "no-local-endpoint-nodeports"
SERVICE_ENDPOINTS, HAIRPIN = "service-endpoints", "hairpin-endpoints"
NODEPORT_ENDPOINTS, NODEPORTS = "nodeport-endpoints", "nodeports"
MAX_PICKED = 16  # endpoint counts with a shared pick chain (more: per-Service chains)
MARK_MASQ, MASQUERADING, SERVICES = "mark-for-masquerade", "masquerading", "services"


def picked_set(n: int) -> str:
    return f"service-ips-{n}-endpoint{'s' if n > 1 else ''}"


def pick_chain(n: int) -> str:
    return f"endpoint-pick-{n}"


def picked_nodeport_set(n: int) -> str:
    return f"service-nodeports-{n}-endpoint{'s' if n > 1 else ''}"


def nodeport_pick_chain(n: int) -> str:
    return f"nodeport-pick-{n}"

Rule = tuple  # ("kind", args...)
Verdict = tuple[str, str | None]  # ("goto", chain) | ("drop", None)
ElemKey = tuple  # (set, ip|None, proto, port[, slot]) | (HAIRPIN, ip)
ElemData = tuple | None  # Verdict for service-ips / service-nodeports, (ip, port) for service-endpoints


def _h(text: str) -> str:
    return hash16(text)[:8]


def chain_base(spn: ServicePortName) -> str:
    tail = f"{spn.namespace}/{spn.name}/{spn.protocol.lower()}/{spn.port}"
    return f"{_h(tail)}-{tail}"


def service_chain(spn: ServicePortName) -> str:
    return f"service-{chain_base(spn)}"


def external_chain(spn: ServicePortName) -> str:
    return f"external-{chain_base(spn)}"


def local_chain(spn: ServicePortName) -> str:
    return f"local-{chain_base(spn)}"


def firewall_chain(spn: ServicePortName) -> str:
    return f"firewall-{chain_base(spn)}"


def endpoint_chain(spn: ServicePortName, ep: Endpoint) -> str:
    tail = f"{spn.namespace}/{spn.name}/{spn.protocol.lower()}/{spn.port}__{ep.ip}/{ep.port}"
    return f"endpoint-{_h(tail)}-{tail}"


def affinity_set(spn: ServicePortName, ep: Endpoint) -> str:
    return "affinity-" + endpoint_chain(spn, ep).removeprefix("endpoint-")


@dataclasses.dataclass
class PortPlan:
    chains: dict[str, list[Rule]] = dataclasses.field(default_factory=dict)
    sets: dict[str, int] = dataclasses.field(default_factory=dict)  # affinity set -> timeout seconds
    elements: dict[ElemKey, ElemData] = dataclasses.field(default_factory=dict)
    hairpin: tuple[str, ...] = ()  # endpoint IPs of a picked port (shared set: the proxier refcounts them)

    def rule_count(self) -> int:
        return sum(len(r) for r in self.chains.values())


def plan_port(sp: ServicePort, endpoints: Iterable[Endpoint], node: NodeConfig) -> PortPlan:
    """One port's chains, sets and map elements."""
    p = PortPlan()
    if sp.cluster_ip is None:
        return p
    spn = sp.name
    sel = categorize(sp, endpoints, node.node_name)
    key = (sp.cluster_ip, sp.protocol, sp.port)
    n = len(sel.cluster)
    if (not sp.affinity_timeout and not sp.external_ips and not sp.load_balancer_ips
            and not sp.uses_local_external and 0 < n <= MAX_PICKED):
        p.elements[(picked_set(n), *key)] = None
        for i, ep in enumerate(sel.cluster):
            p.elements[(SERVICE_ENDPOINTS, *key, i)] = (ep.ip, ep.port)
        if sp.node_port:
            p.elements[(picked_nodeport_set(n), None, sp.protocol, sp.node_port)] = None
            for i, ep in enumerate(sel.cluster):
                p.elements[(NODEPORT_ENDPOINTS, None, sp.protocol, sp.node_port, i)] = (ep.ip, ep.port)
        p.hairpin = tuple(sorted({ep.ip for ep in sel.cluster}))
        return p
    svc, ext, loc = service_chain(spn), external_chain(spn), local_chain(spn)
    vips_ext = list(sp.external_ips) + list(sp.load_balancer_ips)
    external_eps = sel.local if sp.uses_local_external else sel.cluster

    def balance(chain: str, eps: tuple[Endpoint, ...], masq: bool) -> None:
        rules = p.chains.setdefault(chain, [])
        if masq and (node.masquerade_all or node.cluster_cidr):
            rules.append(("svc_masq", sp.cluster_ip, sp.protocol, sp.port,
                          None if node.masquerade_all else node.cluster_cidr))
        if sp.affinity_timeout:
            for ep in eps:
                rules.append(("affinity_check", affinity_set(spn, ep), endpoint_chain(spn, ep)))
        for i, ep in enumerate(eps):
            left = len(eps) - i
            rules.append(("numgen_goto", left, endpoint_chain(spn, ep)) if left > 1 else
                         ("goto", endpoint_chain(spn, ep)))

    if sel.cluster:
        balance(svc, sel.cluster, True)
        p.elements[(SERVICE_IPS, sp.cluster_ip, sp.protocol, sp.port)] = ("goto", svc)
    else:
        p.elements[(NO_EP_SERVICES, *key)] = None

    if sp.externally_accessible:
        if external_eps:
            rules = p.chains.setdefault(ext, [])
            if sp.uses_local_external:
                target = svc if sel.cluster else loc
                if node.cluster_cidr:
                    rules.append(("saddr_goto", node.cluster_cidr, target))
                rules.append(("fib_saddr_local", "jump", MARK_MASQ))
                rules.append(("fib_saddr_local", "goto", target))
                rules.append(("goto", loc))
                balance(loc, sel.local, False)
            else:
                rules.append(("jump", MARK_MASQ))
                rules.append(("goto", svc))
            # loadBalancerSourceRanges: LB traffic from other sources is dropped before it is DNATed
            fw = firewall_chain(spn) if sp.source_ranges and sp.load_balancer_ips else ""
            if fw:
                allowed = list(sp.source_ranges)
                if any(ipaddress.ip_address(ip) in ipaddress.ip_network(c) for c in sp.source_ranges
                       for ip in node.node_ips):
                    allowed += [f"{ip}/32" for ip in sp.load_balancer_ips]
                p.chains[fw] = [("saddr_goto", c, ext) for c in allowed] + [("drop",)]
            for ip in vips_ext:
                target = fw if fw and ip in sp.load_balancer_ips else ext
                p.elements[(SERVICE_IPS, ip, sp.protocol, sp.port)] = ("goto", target)
            if sp.node_port:
                p.elements[(SERVICE_NODEPORTS, None, sp.protocol, sp.node_port)] = ("goto", ext)
        else:
            no_local = sp.uses_local_external and bool(sel.cluster)  # drop: others may have local ones
            svc_set, np_set = (NO_LOCAL_SERVICES, NO_LOCAL_NODEPORTS) if no_local else (NO_EP_SERVICES,
                                                                                        NO_EP_NODEPORTS)
            for ip in vips_ext:
                p.elements[(svc_set, ip, sp.protocol, sp.port)] = None
            if sp.node_port:
                p.elements[(np_set, None, sp.protocol, sp.node_port)] = None

    for ep in sel.all_reachable:
        chain = endpoint_chain(spn, ep)
        rules = [("saddr_jump", ep.ip, MARK_MASQ)]
        if sp.affinity_timeout:
            p.sets[affinity_set(spn, ep)] = sp.affinity_timeout
            rules.append(("affinity_update", affinity_set(spn, ep)))
        rules.append(("dnat", sp.protocol, ep.ip, ep.port))
        p.chains[chain] = rules
    return p

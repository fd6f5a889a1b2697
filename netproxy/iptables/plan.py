"""Pure planning of kube-proxy's iptables layout: Service ports → chains and rule specs → restore text.

No kernel access here: `plan_port` gives one Service port's rules; `full_restore`
and `partial_restore` turn plans into iptables-restore input (--noflush): a full
one declares (and so flushes) every chain we own, a partial one touches only the
changed ports' chains and their dispatch rules.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
from collections.abc import Iterable, Mapping

from netproxy.hashing import ext_chain, fw_chain, hash16, svc_chain, svl_chain
from netproxy.model import Endpoint, ServicePort, ServicePortName, categorize
from netproxy.proxier import NodeConfig

NAT, FILTER = "nat", "filter"
# kube-proxy's largeClusterEndpointsThreshold: above this many endpoints in total, the
# per-endpoint rules (SEP chains, SVC/SVL jumps) carry no comment, which shrinks the nat
# table by ~40% and so every legacy table replace (measured: bench/netproxy_sync.py).
LARGE_CLUSTER_ENDPOINTS = 1000


def large_cluster(endpoint_count: int) -> bool:
    """kube-proxy's largeClusterMode: total endpoints over the threshold."""
    return endpoint_count > LARGE_CLUSTER_ENDPOINTS


@dataclasses.dataclass(frozen=True)
class Names:
    """The fixed chains, under a configurable prefix (default KUBE-)."""

    prefix: str = "KUBE-"

    @property
    def services(self) -> str:
        return f"{self.prefix}SERVICES"

    @property
    def external_services(self) -> str:
        return f"{self.prefix}EXTERNAL-SERVICES"

    @property
    def nodeports(self) -> str:
        return f"{self.prefix}NODEPORTS"

    @property
    def postrouting(self) -> str:
        return f"{self.prefix}POSTROUTING"

    @property
    def mark_masq(self) -> str:
        return f"{self.prefix}MARK-MASQ"

    @property
    def forward(self) -> str:
        return f"{self.prefix}FORWARD"

    @property
    def firewall(self) -> str:
        return f"{self.prefix}PROXY-FIREWALL"

    def owns(self, chain: str) -> bool:
        return chain.startswith(self.prefix)


@dataclasses.dataclass
class PortRules:
    """One Service port's share of the ruleset. Rule specs are the text after `-A CHAIN `."""

    dispatch: dict[tuple[str, str], list[str]] = dataclasses.field(default_factory=dict)  # (table, chain)
    chains: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # nat chains owned by this port

    def rule_count(self) -> int:
        return sum(len(v) for v in self.dispatch.values()) + sum(len(v) for v in self.chains.values())


def _q(text: str) -> str:
    return '"' + text.replace('"', "'") + '"'


def _proto(sp: ServicePort) -> str:
    p = sp.protocol.lower()
    return f"-m {p} -p {p}"


@functools.lru_cache(maxsize=256)
def _stat(left: int) -> str:
    """The statistic match choosing 1 of the `left` remaining endpoints (none for the last)."""
    return f"-m statistic --mode random --probability {1.0 / left:0.10f} " if left > 1 else ""


def plan_port(sp: ServicePort, endpoints: Iterable[Endpoint], node: NodeConfig,
              large: bool = False) -> PortRules:
    """kube-proxy's rules for one Service port (headless ports get none).

    `large`: kube-proxy's large cluster mode, no comments on per-endpoint rules."""
    r = PortRules()
    if sp.cluster_ip is None:
        return r
    n = Names(node.prefix)
    spn = sp.name
    sel = categorize(sp, endpoints, node.node_name)
    svc = svc_chain(spn, n.prefix)
    ext = svl = ""  # only externally reachable ports have these chains (two hashes saved otherwise)
    if sp.externally_accessible:
        ext, svl = ext_chain(spn, n.prefix), svl_chain(spn, n.prefix)
    proto = _proto(sp)
    name = str(spn)
    seps = {ep: f"{n.prefix}SEP-{hash16(f'{name}{sp.protocol.lower()}{ep.ip}:{ep.port}')}"
            for ep in sel.all_reachable}

    def ep_comment(text: str) -> str:
        return "" if large else f"-m comment --comment {_q(text)} "

    def add(table: str, chain: str, spec: str) -> None:
        r.dispatch.setdefault((table, chain), []).append(spec)

    # ClusterIP dispatch (nat) or an immediate reject (filter) when nothing can serve it.
    if sel.cluster:
        add(NAT, n.services, f"-m comment --comment {_q(name + ' cluster IP')} {proto} -d {sp.cluster_ip}/32 "
                             f"--dport {sp.port} -j {svc}")
    else:
        add(FILTER, n.services, f"-m comment --comment {_q(name + ' has no endpoints')} {proto} "
                                f"-d {sp.cluster_ip}/32 --dport {sp.port} -j REJECT "
                                "--reject-with icmp-port-unreachable")

    external_eps = sel.local if sp.uses_local_external else sel.cluster
    # loadBalancerSourceRanges: LB traffic goes through KUBE-FW-, which sends only the allowed sources on to
    # KUBE-EXT-; the rest is not DNATed and so meets KUBE-PROXY-FIREWALL's DROP in the filter table
    fw = fw_chain(spn, n.prefix) if sp.source_ranges and sp.load_balancer_ips and external_eps else ""
    if sp.externally_accessible:
        ext_target = ext if external_eps else None
        for ip, what in [(i, "external IP") for i in sp.external_ips] + \
                        [(i, "loadbalancer IP") for i in sp.load_balancer_ips]:
            if ext_target:
                target = fw if fw and what == "loadbalancer IP" else ext_target
                add(NAT, n.services, f"-m comment --comment {_q(f'{name} {what}')} {proto} -d {ip}/32 "
                                     f"--dport {sp.port} -j {target}")
                if target == fw:
                    add(FILTER, n.firewall,
                        f"-m comment --comment {_q(f'{name} traffic not accepted by {fw}')} {proto} "
                        f"-d {ip}/32 --dport {sp.port} -j DROP")
            else:
                add(FILTER, n.external_services,
                    f"-m comment --comment {_q(name + ' has no endpoints')} {proto} -d {ip}/32 "
                    f"--dport {sp.port} -j REJECT --reject-with icmp-port-unreachable")
        if sp.node_port:
            if ext_target:
                add(NAT, n.nodeports,
                    f"-m comment --comment {_q(name)} {proto} --dport {sp.node_port} -j {ext}")
            else:
                local_only = sp.uses_local_external and sel.cluster
                why = "has no local endpoints" if local_only else "has no endpoints"
                verdict = "DROP" if local_only else "REJECT --reject-with icmp-port-unreachable"
                add(FILTER, n.external_services,
                    f"-m comment --comment {_q(f'{name} {why}')} -m addrtype --dst-type LOCAL {proto} "
                    f"--dport {sp.node_port} -j {verdict}")

    def balance(chain: str, eps: tuple[Endpoint, ...], masq_rule: bool) -> None:
        rules = r.chains.setdefault(chain, [])
        if masq_rule:
            if node.masquerade_all:
                rules.append(f"-m comment --comment {_q(name + ' cluster IP')} {proto} -d {sp.cluster_ip}/32 "
                             f"--dport {sp.port} -j {n.mark_masq}")
            elif node.cluster_cidr:
                rules.append(f"-m comment --comment {_q(name + ' cluster IP')} {proto} -d {sp.cluster_ip}/32 "
                             f"--dport {sp.port} ! -s {node.cluster_cidr} -j {n.mark_masq}")
        if sp.affinity_timeout:
            for ep in eps:
                sep = seps[ep]
                rules.append(f"{'' if large else ep_comment(f'{name} -> {ep}')}-m recent --name {sep} "
                             f"--mask 255.255.255.255 --rsource --rcheck --seconds {sp.affinity_timeout} "
                             f"--reap -j {sep}")
        for i, ep in enumerate(eps):
            left = len(eps) - i
            rules.append(f"{'' if large else ep_comment(f'{name} -> {ep}')}{_stat(left)}-j {seps[ep]}")

    if sel.cluster:
        balance(svc, sel.cluster, True)
    if sp.externally_accessible and external_eps:
        rules = r.chains.setdefault(ext, [])
        if sp.uses_local_external:
            if node.cluster_cidr:
                rules.append(f"-m comment --comment {_q(f'pod traffic for {name} external destinations')} "
                             f"-s {node.cluster_cidr} -j {svc if sel.cluster else svl}")
            masq_local = _q(f"masquerade LOCAL traffic for {name} external destinations")
            rules.append(f"-m comment --comment {masq_local} -m addrtype --src-type LOCAL -j {n.mark_masq}")
            rules.append(f"-m comment --comment {_q(f'route LOCAL traffic for {name} external destinations')}"
                         f" -m addrtype --src-type LOCAL -j {svc if sel.cluster else svl}")
            rules.append(f"-j {svl}")
            balance(svl, sel.local, False)
        else:
            rules.append(f"-m comment --comment {_q(f'masquerade traffic for {name} external destinations')}"
                         f" -j {n.mark_masq}")
            rules.append(f"-j {svc}")
    if fw:
        rules = r.chains.setdefault(fw, [])
        allowed = list(sp.source_ranges)
        if any(ipaddress.ip_address(ip) in ipaddress.ip_network(c) for c in sp.source_ranges
               for ip in node.node_ips):  # the node's own requests may loop back from the LB IP itself
            allowed += [f"{ip}/32" for ip in sp.load_balancer_ips]
        for cidr in allowed:
            rules.append(f"-m comment --comment {_q(name + ' loadbalancer IP')} -s {cidr} -j {ext}")
    cmt, masq = ep_comment(name), n.mark_masq
    for ep, sep in seps.items():
        recent = (f"-m recent --name {sep} --mask 255.255.255.255 --rsource --set "
                  if sp.affinity_timeout else "")
        r.chains[sep] = [
            f"{cmt}-s {ep.ip}/32 -j {masq}",
            f"{cmt}{recent}{proto} -j DNAT --to-destination {ep.ip}:{ep.port}",
        ]
    return r


def base_rules(node: NodeConfig) -> dict[tuple[str, str], list[str]]:
    """The fixed chains' rules (everything except per-port dispatch)."""
    n = Names(node.prefix)
    mark = f"{node.masq_mark:#x}"
    last = _q("kubernetes service nodeports; NOTE: this must be the last rule in this chain")
    nodeports_jump = (
        [f"-m comment --comment {last} -d {ip}/32 -j {n.nodeports}" for ip in node.node_ips]
        if node.node_ips else
        [f"-m comment --comment {last} -m addrtype --dst-type LOCAL -j {n.nodeports}"])
    return {
        (NAT, n.postrouting): [
            f"-m mark ! --mark {mark}/{mark} -j RETURN",
            f"-j MARK --xor-mark {mark}",
            f"-m comment --comment {_q('kubernetes service traffic requiring SNAT')} "
            "-j MASQUERADE --random-fully",
        ],
        (NAT, n.mark_masq): [f"-j MARK --or-mark {mark}"],
        (NAT, n.services + "#tail"): nodeports_jump,  # appended after every dispatch rule
        (FILTER, n.forward): [
            "-m conntrack --ctstate INVALID -j DROP",
            f"-m comment --comment {_q('kubernetes forwarding rules')} "
            f"-m mark --mark {mark}/{mark} -j ACCEPT",
            f"-m comment --comment {_q('kubernetes forwarding conntrack rule')} -m conntrack "
            f"--ctstate RELATED,ESTABLISHED -j ACCEPT",
        ],
    }


def fixed_chains(node: NodeConfig) -> dict[str, list[str]]:
    n = Names(node.prefix)
    return {
        NAT: [n.services, n.nodeports, n.postrouting, n.mark_masq],
        FILTER: [n.services, n.external_services, n.forward, n.firewall],
    }


def jump_rules(node: NodeConfig) -> list[tuple[str, str, str]]:
    """(table, builtin chain, rule spec): the hooks from the builtin chains into ours."""
    n = Names(node.prefix)
    new = "-m conntrack --ctstate NEW"
    portals = f"-m comment --comment {_q('kubernetes service portals')} -j {n.services}"
    external = (f"-m comment --comment {_q('kubernetes externally-visible service portals')} "
                f"-j {n.external_services}")
    firewall = f"{new} -m comment --comment {_q('kube-proxy firewall rules')} -j {n.firewall}"
    return [
        (NAT, "PREROUTING", portals),
        (NAT, "OUTPUT", portals),
        (NAT, "POSTROUTING", f"-m comment --comment {_q('kubernetes postrouting rules')} -j {n.postrouting}"),
        (FILTER, "INPUT", firewall),
        (FILTER, "INPUT", f"{new} {external}"),
        (FILTER, "FORWARD", firewall),
        (FILTER, "OUTPUT", firewall),
        (FILTER, "FORWARD", f"{new} {portals}"),
        (FILTER, "FORWARD", f"{new} {external}"),
        (FILTER, "FORWARD", f"-m comment --comment {_q('kubernetes forwarding rules')} -j {n.forward}"),
        (FILTER, "OUTPUT", f"{new} {portals}"),
    ]


def full_restore(plans: Mapping[ServicePortName, PortRules], node: NodeConfig,
                 stale_chains: Iterable[str] = (), missing_jumps: Iterable[tuple[str, str, str]] = ()) -> str:
    """iptables-restore --noflush input rewriting every chain we own (and dropping stale ones)."""
    n = Names(node.prefix)
    base = base_rules(node)
    fixed = fixed_chains(node)
    out: list[str] = []
    for table in (FILTER, NAT):
        out.append(f"*{table}")
        chains = list(fixed[table])
        if table == NAT:
            for p in plans.values():
                chains.extend(p.chains)
            stale = [c for c in stale_chains if c not in set(chains)]
            chains.extend(stale)
        else:
            stale = []
        out.extend(f":{c} - [0:0]" for c in chains)
        for (t, chain, spec) in missing_jumps:
            if t == table:
                out.append(f"-I {chain} 1 {spec}")
        for (t, chain), specs in base.items():
            if t == table and not chain.endswith("#tail"):
                out.extend(f"-A {chain} {s}" for s in specs)
        for p in plans.values():
            for (t, chain), specs in p.dispatch.items():
                if t == table:
                    out.extend(f"-A {chain} {s}" for s in specs)
        if table == NAT:
            out.extend(f"-A {n.services} {s}" for s in base[(NAT, n.services + "#tail")])
            for p in plans.values():
                for chain, specs in p.chains.items():
                    out.extend(f"-A {chain} {s}" for s in specs)
            out.extend(f"-X {c}" for c in stale)
        out.append("COMMIT")
    return "\n".join(out) + "\n"


Op = tuple[str, ...]  # ("declare", chain) | ("-D"|"-I"|"-A", chain, spec) | ("-X", chain)


def partial_ops(old: Mapping[ServicePortName, PortRules], new: Mapping[ServicePortName, PortRules],
                changed: Iterable[ServicePortName]) -> dict[str, list[Op]]:
    """Per table, the operations turning `old` into `new` for the changed ports, in a safe order.

    Dispatch rules are deleted/inserted one by one (inserted at the top of their chain so
    the NodePorts jump stays last); a port's chains are rewritten only if their rules
    changed; chains no port needs any more are flushed and deleted last.
    """
    changed = list(changed)
    still_used: set[str] = set()
    for spn in changed:
        if spn in new:
            still_used.update(new[spn].chains)
    declares: dict[str, list[Op]] = {FILTER: [], NAT: []}
    body: dict[str, list[Op]] = {FILTER: [], NAT: []}
    deletes: list[str] = []
    for spn in changed:
        op, np_ = old.get(spn) or PortRules(), new.get(spn) or PortRules()
        for key in op.dispatch.keys() | np_.dispatch.keys():
            table, chain = key
            before, after = op.dispatch.get(key, []), np_.dispatch.get(key, [])
            body[table].extend(("-D", chain, x) for x in before if x not in after)
            verb = "-A" if chain.endswith("NODEPORTS") or chain.endswith("EXTERNAL-SERVICES") else "-I"
            body[table].extend((verb, chain, x) for x in after if x not in before)
        for chain, specs in np_.chains.items():
            if op.chains.get(chain) != specs:
                declares[NAT].append(("declare", chain))
                body[NAT].extend(("-A", chain, x) for x in specs)
        deletes.extend(c for c in op.chains if c not in still_used)
    deletes = list(dict.fromkeys(deletes))
    out: dict[str, list[Op]] = {}
    for table in (FILTER, NAT):
        ops = list(dict.fromkeys(declares[table]))
        if table == NAT:
            ops += [("declare", c) for c in deletes]
        ops += body[table]
        if table == NAT:
            ops += [("-X", c) for c in deletes]
        if ops:
            out[table] = ops
    return out


def partial_restore(old: Mapping[ServicePortName, PortRules], new: Mapping[ServicePortName, PortRules],
                    changed: Iterable[ServicePortName]) -> str:
    """iptables-restore --noflush input for the changed ports only (see `partial_ops`)."""
    lines: list[str] = []
    for table, ops in partial_ops(old, new, changed).items():
        lines.append(f"*{table}")
        for o in ops:
            if o[0] == "declare":
                lines.append(f":{o[1]} - [0:0]")
            elif o[0] == "-X":
                lines.append(f"-X {o[1]}")
            elif o[0] == "-I":
                lines.append(f"-I {o[1]} 1 {o[2]}")
            else:
                lines.append(f"{o[0]} {o[1]} {o[2]}")
        lines.append("COMMIT")
    return "\n".join(lines) + "\n" if lines else ""

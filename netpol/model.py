"""The policy model: NetworkPolicies, Pods and Namespaces compiled into named IP sets and abstract rules.

Kubernetes semantics (networking.k8s.io/v1): a pod is isolated for a direction once any policy whose
podSelector selects it (in the policy's namespace) lists that direction in policyTypes; then only the
union of those policies' rules is allowed. A rule allows a flow when a peer matches (podSelector in the
policy's namespace, namespaceSelector across namespaces, both combined = AND, ipBlock minus except;
no peers = anyone) and a port matches (number, number..endPort, or a name resolved against the
destination pod's container ports; no ports = any). Replies pass through conntrack in the backends.

Design (as kube-router and Calico do): rules only ever name sets, so a pod or namespace label change
only changes set *elements*; rules change only when a policy object changes. The model keeps per-set
reference counts of elements contributed by (policy, pod) pairs and records what changed since the last
`take_changes()`; the backends turn that into ipset / nft element updates.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.api.selectors import Selector, from_label_selector

INGRESS, EGRESS = "Ingress", "Egress"
# set kinds: "ip" (addresses), "net" (CIDRs, interval), "ipport" (address . protocol . port)
ISO_SETS = {INGRESS: "ING-ISO", EGRESS: "EGR-ISO"}
IPV4_ANY = ipaddress.ip_network("0.0.0.0/0")


@dataclasses.dataclass(frozen=True)
class PortMatch:
    protocol: str  # tcp | udp | sctp
    port: int | None = None  # None: any port of the protocol
    end_port: int | None = None
    named_set: str | None = None  # named port: the (dst ip, proto, port) set to match instead


@dataclasses.dataclass(frozen=True)
class Line:
    """One rule: peer (set or None = any) and optional port match → mark the direction allowed."""
    peer_set: str | None
    peer_kind: str | None  # "ip" | "net"
    port: PortMatch | None


@dataclasses.dataclass(frozen=True)
class Peer:
    pod: Selector | None
    ns: Selector | None  # None: the policy's own namespace


@dataclasses.dataclass(frozen=True)
class RuleSpec:
    peers: tuple[Peer, ...]
    cidrs: tuple[str, ...]  # ipBlocks with their excepts already cut out
    any_peer: bool  # no from/to at all
    ports: tuple[tuple[str, int | None, int | None, str | None], ...]  # (proto, port, endPort, name)


@dataclasses.dataclass
class Policy:
    key: str
    pid: str  # short id naming its sets and chains; new per spec version
    namespace: str
    target: Selector
    types: tuple[str, ...]
    rules: dict[str, list[RuleSpec]]
    lines: dict[str, list[Line]] = dataclasses.field(default_factory=dict)
    sets: dict[str, str] = dataclasses.field(default_factory=dict)  # set name -> kind
    static: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)  # cidr set contents

    def chain(self, direction: str) -> str:
        return f"{'I' if direction == INGRESS else 'E'}-{self.pid}"

    def target_set(self) -> str:
        return f"T-{self.pid}"


@dataclasses.dataclass(frozen=True)
class PodInfo:
    key: str
    namespace: str
    labels: Mapping[str, str]
    ip: str | None
    local: bool
    ports: tuple[tuple[str, str, int], ...]  # (name, proto, containerPort)
    lkey: tuple[tuple[str, str], ...] = ()  # the labels, hashable (selector match cache key)


@dataclasses.dataclass(frozen=True)
class RulePlan:
    """One rule, precompiled for evaluation: interned selector ids and the set names it feeds."""
    peer_set: str | None
    any_peer: bool
    peers: tuple[tuple[int | None, int | None], ...]  # (pod selector id, namespace selector id)
    named: tuple[tuple[str, str, str], ...]  # (set name, protocol, port name)


@dataclasses.dataclass
class Changes:
    """What a backend must write since the last take: set elements, new/removed sets and chains."""
    full: bool = False
    added: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    removed: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    new_sets: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> kind
    gone_sets: set[str] = dataclasses.field(default_factory=set)
    chains_changed: bool = False  # policies added/removed/changed: rewrite the dispatch and policy chains
    new_chains: set[str] = dataclasses.field(default_factory=set)
    gone_chains: set[str] = dataclasses.field(default_factory=set)

    def empty(self) -> bool:
        return not (self.full or any(self.added.values()) or any(self.removed.values()) or self.new_sets
                    or self.gone_sets or self.chains_changed)


class PolicyError(ValueError):
    pass


def _proto(p: str | None) -> str:
    return (p or "TCP").lower()


def cidr_minus(cidr: str, excepts: Iterable[str]) -> list[str]:
    """`cidr` with every `except` range cut out, as disjoint CIDRs (IPv4 only)."""
    nets = [ipaddress.ip_network(cidr, strict=False)]
    for ex in excepts:
        e = ipaddress.ip_network(ex, strict=False)
        out = []
        for n in nets:
            if e.version != n.version or not n.overlaps(e):
                out.append(n)
            elif e.supernet_of(n):
                continue
            else:
                out.extend(n.address_exclude(e))
        nets = out
    return [str(n) for n in ipaddress.collapse_addresses(n for n in nets if n.version == 4)]


def _selector(sel: Any) -> Selector | None:
    return None if sel is None else from_label_selector(sel, none_matches=False)


def policy_types(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """policyTypes as the apiserver defaults them: Ingress always, Egress when egress rules exist."""
    types = spec.get("policyTypes")
    if types:
        return tuple(t for t in (INGRESS, EGRESS) if t in types)
    return (INGRESS, EGRESS) if spec.get("egress") else (INGRESS,)


def compile_policy(obj: Mapping[str, Any], pid: str) -> Policy:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    ns = meta.get("namespace") or "default"
    key = f"{ns}/{meta.get('name')}"
    types = policy_types(spec)
    rules: dict[str, list[RuleSpec]] = {}
    for direction, field, peer_field in ((INGRESS, "ingress", "from"), (EGRESS, "egress", "to")):
        out = []
        for r in spec.get(field) or []:
            r = r or {}
            peers, cidrs = [], []
            for p in r.get(peer_field) or []:
                if p.get("ipBlock"):
                    blk = p["ipBlock"]
                    cidrs.extend(cidr_minus(blk["cidr"], blk.get("except") or ()))
                else:
                    peers.append(Peer(_selector(p.get("podSelector")) if "podSelector" in p else None,
                                      _selector(p.get("namespaceSelector")) if "namespaceSelector" in p else None))
            ports = []
            for p in r.get("ports") or []:
                port = p.get("port")
                proto = _proto(p.get("protocol"))
                if isinstance(port, str) and not port.isdigit():
                    ports.append((proto, None, None, port))
                else:
                    num = int(port) if port is not None else None
                    ports.append((proto, num, p.get("endPort") if num is not None else None, None))
            out.append(RuleSpec(tuple(peers), tuple(cidrs), not (r.get(peer_field) or []), tuple(ports)))
        rules[direction] = out
    pol = Policy(key, pid, ns, from_label_selector(spec.get("podSelector") or {}), types, rules)
    _plan_lines(pol)
    return pol


def _plan_lines(pol: Policy) -> None:
    pol.sets[pol.target_set()] = "ip"
    for direction in pol.types:
        lines: list[Line] = []
        tag = "I" if direction == INGRESS else "E"
        for i, r in enumerate(pol.rules.get(direction, [])):
            peer_matches: list[tuple[str | None, str | None]] = []
            if r.any_peer:
                peer_matches.append((None, None))
            else:
                if r.peers:
                    name = f"{tag}{pol.pid}-{i}P"
                    pol.sets[name] = "ip"
                    peer_matches.append((name, "ip"))
                if r.cidrs:
                    name = f"{tag}{pol.pid}-{i}C"
                    pol.sets[name] = "net"
                    pol.static[name] = frozenset(r.cidrs)
                    peer_matches.append((name, "net"))
            port_matches: list[PortMatch | None] = []
            for j, (proto, port, end, pname) in enumerate(r.ports):
                if pname is not None:
                    name = f"{tag}{pol.pid}-{i}N{j}"
                    pol.sets[name] = "ipport"
                    port_matches.append(PortMatch(proto, named_set=name))
                else:
                    port_matches.append(PortMatch(proto, port, end))
            if not port_matches:
                port_matches.append(None)
            for ps, kind in peer_matches:
                for pm in port_matches:
                    lines.append(Line(ps, kind, pm))
        pol.lines[direction] = lines


def pod_info(obj: Mapping[str, Any], node_name: str | None) -> PodInfo | None:
    """What policy needs of a pod; None for pods policy ignores (no IP yet, host network, finished)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    ip = status.get("podIP")
    if not ip or spec.get("hostNetwork") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    try:
        if ipaddress.ip_address(ip).version != 4:
            return None
    except ValueError:
        return None
    ports = []
    for c in spec.get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") and p.get("containerPort"):
                ports.append((p["name"], _proto(p.get("protocol")), int(p["containerPort"])))
    ns = meta.get("namespace") or "default"
    local = node_name is None or spec.get("nodeName") == node_name
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    return PodInfo(f"{ns}/{meta.get('name')}", ns, labels, ip, local, tuple(ports), tuple(sorted(labels.items())))


class PolicyModel:
    """The desired sets and rules for one node, kept current incrementally.

    `node_name` None treats every pod as local (a single-node view). Feed objects with `set_pod`,
    `set_namespace`, `set_policy` (None to delete) and drain `take_changes()` after each batch.
    """

    def __init__(self, node_name: str | None = None) -> None:
        self.node_name = node_name
        self.pods: dict[str, PodInfo] = {}
        self.pods_by_ns: dict[str, set[str]] = {}
        self.namespaces: dict[str, dict[str, str]] = {}
        self.policies: dict[str, Policy] = {}
        self._gen = itertools.count(1)
        self.elements: dict[str, dict[str, int]] = {s: {} for s in ISO_SETS.values()}  # set -> elem -> refs
        self.set_kinds: dict[str, str] = {s: "ip" for s in ISO_SETS.values()}
        self._contrib: dict[tuple[str, str], dict[str, frozenset[str]]] = {}  # (policy key, pod key) -> sets
        self._by_pod: dict[str, set[str]] = {}  # pod key -> policy keys with contributions
        self._changes = Changes(full=True)
        self._sel_ids: dict[Selector, int] = {}
        self._sels: list[Selector] = []
        self._match: dict[tuple[int, tuple[tuple[str, str], ...]], bool] = {}
        self._ns_lkey: dict[str, tuple[tuple[str, str], ...]] = {}
        self._plans: dict[str, tuple[int, dict[str, list[RulePlan]]]] = {}  # policy key -> (target id, plans)

    # ------------------------------------------------------------------ selector matching (memoized)
    def _sid(self, sel: Selector | None) -> int | None:
        if sel is None:
            return None
        sid = self._sel_ids.get(sel)
        if sid is None:
            sid = self._sel_ids[sel] = len(self._sels)
            self._sels.append(sel)
        return sid

    def _matches(self, sid: int, labels: Mapping[str, str], lkey: tuple[tuple[str, str], ...]) -> bool:
        k = (sid, lkey)
        r = self._match.get(k)
        if r is None:
            if len(self._match) > 200_000:
                self._match.clear()
            r = self._match[k] = self._sels[sid].matches(labels)
        return r

    def _plan(self, p: Policy) -> tuple[int, dict[str, list[RulePlan]]]:
        plans: dict[str, list[RulePlan]] = {}
        for direction in p.types:
            tag = "I" if direction == INGRESS else "E"
            out = []
            for i, r in enumerate(p.rules.get(direction, [])):
                named = tuple((f"{tag}{p.pid}-{i}N{j}", proto, pname)
                              for j, (proto, _port, _end, pname) in enumerate(r.ports) if pname is not None)
                out.append(RulePlan(f"{tag}{p.pid}-{i}P" if r.peers and not r.any_peer else None, r.any_peer,
                                    tuple((self._sid(x.pod), self._sid(x.ns)) for x in r.peers), named))
            plans[direction] = out
        return self._sid(p.target) or 0, plans

    # ------------------------------------------------------------------ inputs
    def set_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        """A namespace's labels (None: deleted). Only pods of that namespace are re-evaluated."""
        old = self.namespaces.get(name)
        new = dict(labels) if labels is not None else None
        if old == new:
            return
        if new is None:
            self.namespaces.pop(name, None)
            self._ns_lkey.pop(name, None)
        else:
            self.namespaces[name] = new
            self._ns_lkey[name] = tuple(sorted(new.items()))
        for pk in sorted(self.pods_by_ns.get(name, ())):
            self._eval_pod(self.pods[pk], [p for p in self.policies.values() if self._uses_ns_selector(p)])

    def set_pod(self, key: str, obj: Mapping[str, Any] | None) -> None:
        info = pod_info(obj, self.node_name) if obj is not None else None
        old = self.pods.get(key)
        if old == info:
            return
        if old is not None:
            self.pods_by_ns.get(old.namespace, set()).discard(key)
        if info is None:
            self.pods.pop(key, None)
            for pk in list(self._by_pod.get(key, ())):
                self._apply(pk, key, {})
            self._by_pod.pop(key, None)
            return
        self.pods[key] = info
        self.pods_by_ns.setdefault(info.namespace, set()).add(key)
        self._eval_pod(info, list(self.policies.values()))

    def set_policy(self, key: str, obj: Mapping[str, Any] | None) -> None:
        old = self.policies.get(key)
        if obj is None:
            if old is not None:
                self._remove_policy(old)
            return
        digest = hashlib.sha256(key.encode()).hexdigest()[:6]
        new = compile_policy(obj, f"{digest}{next(self._gen) % 4096:03x}")
        if old is not None and old.types == new.types and old.target == new.target and old.rules == new.rules:
            return
        if old is not None:
            self._remove_policy(old)
        self.policies[key] = new
        self._plans[key] = self._plan(new)
        ch = self._changes
        for name, kind in new.sets.items():
            self.set_kinds[name] = kind
            self.elements[name] = {}
            ch.new_sets[name] = kind
            ch.gone_sets.discard(name)
        for name, elems in new.static.items():
            for e in elems:
                self._ref(name, e, 1)
        ch.chains_changed = True
        ch.new_chains.update(new.chain(d) for d in new.types)
        for pk in self._candidates(new):
            self._eval_one(new, self.pods[pk])

    # ------------------------------------------------------------------ outputs
    def take_changes(self) -> Changes:
        ch, self._changes = self._changes, Changes()
        return ch

    def force_full(self) -> None:
        self._changes.full = True

    def ordered_policies(self) -> list[Policy]:
        return [self.policies[k] for k in sorted(self.policies)]

    def set_elements(self, name: str) -> set[str]:
        return set(self.elements.get(name, {}))

    def isolated(self, pod_key: str) -> dict[str, bool]:
        """Whether a (local) pod is isolated for ingress / egress (for tests and debugging)."""
        info = self.pods.get(pod_key)
        if info is None:
            return {INGRESS: False, EGRESS: False}
        return {d: info.ip in self.elements[s] for d, s in ISO_SETS.items()}

    # ------------------------------------------------------------------ evaluation
    @staticmethod
    def _uses_ns_selector(p: Policy) -> bool:
        return any(peer.ns is not None for rules in p.rules.values() for r in rules for peer in r.peers)

    def _candidates(self, p: Policy) -> set[str]:
        """Pods that can contribute to p's sets (saves scanning every pod for namespace-scoped policies)."""
        if any(r.any_peer and any(pt[3] for pt in r.ports) for r in p.rules.get(EGRESS, [])):
            return set(self.pods)
        out = set(self.pods_by_ns.get(p.namespace, ()))
        for rules in p.rules.values():
            for r in rules:
                for peer in r.peers:
                    if peer.ns is None:
                        continue
                    for ns, labels in self.namespaces.items():
                        if peer.ns.matches(labels):
                            out |= self.pods_by_ns.get(ns, set())
        return out

    def _eval_pod(self, info: PodInfo, policies: Iterable[Policy]) -> None:
        for p in policies:
            self._eval_one(p, info)

    def _peer_matches(self, p: Policy, pod_sid: int | None, ns_sid: int | None, pod: PodInfo) -> bool:
        if ns_sid is None:
            if pod.namespace != p.namespace:
                return False
        else:
            nkey = self._ns_lkey.get(pod.namespace)
            if nkey is None or not self._matches(ns_sid, self.namespaces[pod.namespace], nkey):
                return False
        return pod_sid is None or self._matches(pod_sid, pod.labels, pod.lkey)

    def _eval_one(self, p: Policy, pod: PodInfo) -> None:
        """Which of p's sets `pod` belongs to (with which elements), applied as reference-count changes."""
        ip = pod.ip or ""
        out: dict[str, frozenset[str]] = {}
        target_sid, plans = self._plans[p.key]
        targeted = pod.local and pod.namespace == p.namespace and self._matches(target_sid, pod.labels, pod.lkey)
        if targeted:
            me = frozenset((ip,))
            out[p.target_set()] = me
            for d in p.types:
                out[ISO_SETS[d]] = me
        for direction, rules in plans.items():
            for r in rules:
                peer = r.any_peer or any(self._peer_matches(p, ps, ns, pod) for ps, ns in r.peers)
                if peer and r.peer_set is not None:
                    out[r.peer_set] = frozenset((ip,))
                # named ports resolve on the destination: the target pod (ingress) or the peer pod (egress)
                if not r.named or not (targeted if direction == INGRESS else peer):
                    continue
                for set_name, proto, pname in r.named:
                    els = frozenset(f"{ip},{proto},{cport}" for name, cproto, cport in pod.ports
                                    if name == pname and cproto == proto)
                    if els:
                        out[set_name] = els
        if out or (p.key, pod.key) in self._contrib:
            self._apply(p.key, pod.key, out)

    def _apply(self, policy_key: str, pod_key: str, new: dict[str, frozenset[str]]) -> None:
        ck = (policy_key, pod_key)
        old = self._contrib.get(ck)
        if old == new:
            return
        ref = self._ref
        if not old:
            for name, els in new.items():
                for e in els:
                    ref(name, e, 1)
        else:
            for name in old.keys() | new.keys():
                o, n = old.get(name, frozenset()), new.get(name, frozenset())
                if o == n:
                    continue
                for e in n - o:
                    ref(name, e, 1)
                for e in o - n:
                    ref(name, e, -1)
        if new:
            self._contrib[ck] = new
            self._by_pod.setdefault(pod_key, set()).add(policy_key)
        else:
            self._contrib.pop(ck, None)
            s = self._by_pod.get(pod_key)
            if s is not None:
                s.discard(policy_key)

    def _ref(self, name: str, elem: str, delta: int) -> None:
        refs = self.elements.setdefault(name, {})
        n = refs.get(elem, 0) + delta
        if n > 1:
            refs[elem] = n
            return
        ch = self._changes
        if n <= 0:
            refs.pop(elem, None)
            if n == 0 and delta < 0:
                added = ch.added.get(name)
                if added is not None and elem in added:
                    added.discard(elem)
                else:
                    ch.removed.setdefault(name, set()).add(elem)
        else:
            refs[elem] = n
            if delta > 0:
                removed = ch.removed.get(name)
                if removed is not None and elem in removed:
                    removed.discard(elem)
                else:
                    ch.added.setdefault(name, set()).add(elem)

    def _remove_policy(self, p: Policy) -> None:
        for pk in list(self.pods):
            if (p.key, pk) in self._contrib:
                self._apply(p.key, pk, {})
        self.policies.pop(p.key, None)
        self._plans.pop(p.key, None)
        ch = self._changes
        for name in p.sets:
            self.elements.pop(name, None)
            self.set_kinds.pop(name, None)
            ch.added.pop(name, None)
            ch.removed.pop(name, None)
            if name in ch.new_sets:
                del ch.new_sets[name]
            else:
                ch.gone_sets.add(name)
        ch.chains_changed = True
        for d in p.types:
            c = p.chain(d)
            if c in ch.new_chains:
                ch.new_chains.discard(c)
            else:
                ch.gone_chains.add(c)

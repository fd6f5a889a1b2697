"""The policy model: NetworkPolicies, Pods and Namespaces compiled into named IP sets and abstract rules.

Kubernetes semantics (networking.k8s.io/v1): a pod is isolated for a direction once any policy whose
podSelector selects it (in the policy's namespace) lists that direction in policyTypes; then only the
union of those policies' rules is allowed. A rule allows a flow when a peer matches (podSelector in the
policy's namespace, namespaceSelector across namespaces, both combined = AND, ipBlock minus except;
no peers = anyone) and a port matches (number, number..endPort, or a name resolved against the
destination pod's container ports; no ports = any). Replies pass through conntrack in the backends.

Design (as Calico's selector sets and kube-router do): rules only ever name sets, so a pod or namespace
label change only changes set *elements*; rules change only when a policy object changes. Sets are
content-addressed by their definition (namespace + selectors, ipBlocks, named port), so policies with
the same selectors share one set. The model keeps per-set reference counts of elements contributed by
pods and records what changed since the last `take_changes()`; the backends turn that into ipset / nft
element updates. Memberships are memoized per (selector, label set).
"""

from __future__ import annotations

import dataclasses
import functools
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


PortSpec = tuple[str, int | None, int | None, str | None]  # (proto, port, endPort, name)


@dataclasses.dataclass(frozen=True)
class RuleSpec:
    peers: tuple[Peer, ...]
    cidrs: tuple[str, ...]  # ipBlocks with their excepts already cut out
    any_peer: bool  # no from/to at all
    ports: tuple[PortSpec, ...]


_PREFIX = {"target": "T", "peer": "P", "named": "N", "cidr": "C"}
_ELEM_KIND = {"target": "ip", "peer": "ip", "named": "ipport", "cidr": "net"}


@dataclasses.dataclass(frozen=True)
class SetDef:
    """What decides a set's members; equal definitions are one shared set."""
    kind: str  # target | peer | named | cidr
    namespace: str = ""
    target: Selector | None = None  # target pods (also the destinations of an ingress named port)
    peers: tuple[Peer, ...] = ()  # peer pods (also the destinations of an egress named port)
    any_peer: bool = False
    proto: str = ""
    port_name: str = ""
    cidrs: tuple[str, ...] = ()

    @functools.cached_property
    def name(self) -> str:
        return f"{_PREFIX[self.kind]}-{hashlib.sha1(repr(self).encode()).hexdigest()[:10]}"

    @property
    def elem_kind(self) -> str:
        return _ELEM_KIND[self.kind]

    def uses_namespaces(self) -> bool:
        return any(p.ns is not None for p in self.peers)


@dataclasses.dataclass
class Policy:
    key: str
    pid: str  # short id naming its chains; new per spec version
    namespace: str
    target: Selector
    types: tuple[str, ...]
    rules: dict[str, list[RuleSpec]]
    lines: dict[str, list[Line]] = dataclasses.field(default_factory=dict)
    defs: dict[str, SetDef] = dataclasses.field(default_factory=dict)  # every set its rules name
    rule_sets: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)  # tests, debugging

    def chain(self, direction: str) -> str:
        """Policies with the same target set share one chain per direction (their rules concatenated),
        so a packet's dispatch walks distinct target sets, not every policy."""
        return f"{'I' if direction == INGRESS else 'E'}-{self.target_set()}"

    def target_set(self) -> str:
        return SetDef("target", self.namespace, self.target).name


@dataclasses.dataclass(frozen=True)
class PodInfo:
    key: str
    namespace: str
    labels: Mapping[str, str]
    ip: str | None
    local: bool
    ports: tuple[tuple[str, str, int], ...]  # (name, proto, containerPort)
    lkey: tuple[tuple[str, str], ...] = ()  # the labels, hashable (selector match cache key)


@dataclasses.dataclass
class Changes:
    """What a backend must write since the last take: set elements, new/removed sets and chains."""
    full: bool = False
    added: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    removed: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    new_sets: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> kind
    gone_sets: set[str] = dataclasses.field(default_factory=set)
    chains_changed: bool = False  # policies added/removed/changed: rewrite the dispatch and policy chains
    dirty_chains: set[str] = dataclasses.field(default_factory=set)  # (re)write these
    gone_chains: set[str] = dataclasses.field(default_factory=set)

    def empty(self) -> bool:
        return not (self.full or any(self.added.values()) or any(self.removed.values()) or self.new_sets
                    or self.gone_sets or self.chains_changed)


def _proto(p: str | None) -> str:
    return (p or "TCP").lower()


def cidr_minus(cidr: str, excepts: Iterable[str]) -> list[str]:
    """`cidr` with every `except` range cut out, as disjoint CIDRs (IPv4 only)."""
    net = ipaddress.ip_network(cidr, strict=False)
    nets = [net] if isinstance(net, ipaddress.IPv4Network) else []
    for ex in excepts:
        e = ipaddress.ip_network(ex, strict=False)
        if not isinstance(e, ipaddress.IPv4Network):
            continue
        out = []
        for n in nets:
            if not n.overlaps(e):
                out.append(n)
            elif e.supernet_of(n):
                continue
            else:
                out.extend(n.address_exclude(e))
        nets = out
    return [str(n) for n in ipaddress.collapse_addresses(nets)]


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
                    pod_sel = _selector(p.get("podSelector")) if "podSelector" in p else None
                    ns_sel = _selector(p.get("namespaceSelector")) if "namespaceSelector" in p else None
                    peers.append(Peer(pod_sel, ns_sel))
            ports: list[PortSpec] = []
            for p in r.get("ports") or []:
                port = p.get("port")
                proto = _proto(p.get("protocol"))
                if isinstance(port, str) and not port.isdigit():
                    ports.append((proto, None, None, port))
                else:
                    num = int(port) if port is not None else None
                    ports.append((proto, num, p.get("endPort") if num is not None else None, None))
            out.append(RuleSpec(tuple(peers), tuple(sorted(set(cidrs))), not (r.get(peer_field) or []),
                                tuple(ports)))
        rules[direction] = out
    pol = Policy(key, pid, ns, from_label_selector(spec.get("podSelector") or {}), types, rules)
    _plan_lines(pol)
    return pol


def _plan_lines(pol: Policy) -> None:
    target = SetDef("target", pol.namespace, pol.target)
    pol.defs[target.name] = target
    for direction in pol.types:
        lines: list[Line] = []
        info: list[dict[str, Any]] = []
        for r in pol.rules.get(direction, []):
            peer_matches: list[tuple[str | None, str | None]] = []
            entry: dict[str, Any] = {"peer": None, "cidr": None, "named": []}
            if r.any_peer:
                peer_matches.append((None, None))
            else:
                if r.peers:
                    d = SetDef("peer", pol.namespace, peers=r.peers)
                    pol.defs[d.name] = d
                    entry["peer"] = d.name
                    peer_matches.append((d.name, "ip"))
                if r.cidrs:
                    d = SetDef("cidr", cidrs=r.cidrs)
                    pol.defs[d.name] = d
                    entry["cidr"] = d.name
                    peer_matches.append((d.name, "net"))
            port_matches: list[PortMatch | None] = []
            for proto, port, end, pname in r.ports:
                if pname is not None:
                    if direction == INGRESS:
                        d = SetDef("named", pol.namespace, target=pol.target, proto=proto, port_name=pname)
                    else:
                        d = SetDef("named", pol.namespace, peers=r.peers, any_peer=r.any_peer, proto=proto,
                                   port_name=pname)
                    pol.defs[d.name] = d
                    entry["named"].append(d.name)
                    port_matches.append(PortMatch(proto, named_set=d.name))
                else:
                    port_matches.append(PortMatch(proto, port, end))
            if not port_matches:
                port_matches.append(None)
            for ps, kind in peer_matches:
                for pm in port_matches:
                    lines.append(Line(ps, kind, pm))
            info.append(entry)
        pol.lines[direction] = lines
        pol.rule_sets[direction] = info


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
    return PodInfo(f"{ns}/{meta.get('name')}", ns, labels, ip, local, tuple(ports),
                   tuple(sorted(labels.items())))


_Plan = tuple[int | None, tuple[tuple[int | None, int | None], ...]]  # (target sid, ((pod sid, ns sid), ...))


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
        self.defs: dict[str, SetDef] = {}  # pod-derived and cidr sets in use
        self._def_refs: dict[str, int] = {}  # policies naming each set
        self._iso_refs: dict[str, dict[str, int]] = {}  # target set -> direction -> policies isolating
        self._plans: dict[str, _Plan] = {}
        self._ns_defs: set[str] = set()  # sets whose members depend on namespace labels
        self._contrib: dict[tuple[str, str], frozenset[str]] = {}  # (set, pod key) -> elements
        self._by_pod: dict[str, set[str]] = {}  # pod key -> sets it contributes to
        self._members: dict[str, set[str]] = {}  # set -> pod keys contributing to it
        self._changes = Changes(full=True)
        self._sel_ids: dict[Selector, int] = {}
        self._sels: list[Selector] = []
        self._match: dict[tuple[int, tuple[tuple[str, str], ...]], bool] = {}
        self._ns_lkey: dict[str, tuple[tuple[str, str], ...]] = {}

    # ------------------------------------------------------------------ inputs
    def set_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        """A namespace's labels (None: deleted). Only that namespace's pods are re-evaluated, and only
        against sets with namespace selectors."""
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
        defs = [self.defs[n] for n in sorted(self._ns_defs)]
        for pk in sorted(self.pods_by_ns.get(name, ())):
            pod = self.pods[pk]
            for d in defs:
                self._apply(d, pk, self._eval(d, pod))

    def set_pod(self, key: str, obj: Mapping[str, Any] | None) -> None:
        info = pod_info(obj, self.node_name) if obj is not None else None
        old = self.pods.get(key)
        if old == info:
            return
        if old is not None:
            self.pods_by_ns.get(old.namespace, set()).discard(key)
        if info is None:
            self.pods.pop(key, None)
            for name in list(self._by_pod.get(key, ())):
                self._apply(self.defs[name], key, frozenset())
            self._by_pod.pop(key, None)
            return
        self.pods[key] = info
        self.pods_by_ns.setdefault(info.namespace, set()).add(key)
        for d in self.defs.values():
            if d.kind != "cidr":
                self._apply(d, key, self._eval(d, info))

    def set_policy(self, key: str, obj: Mapping[str, Any] | None) -> None:
        old = self.policies.get(key)
        if obj is None:
            if old is not None:
                self.policies.pop(key)
                self._release(old)
            return
        digest = hashlib.sha256(key.encode()).hexdigest()[:6]
        new = compile_policy(obj, f"{digest}{next(self._gen) % 4096:03x}")
        if old is not None and old.types == new.types and old.target == new.target and old.rules == new.rules:
            return
        self.policies[key] = new
        self._acquire(new)  # before releasing the old version, so sets both use are kept
        if old is not None:
            self._release(old)

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

    # ------------------------------------------------------------------ policies → sets
    def _acquire(self, p: Policy) -> None:
        ch = self._changes
        for name, d in p.defs.items():
            n = self._def_refs.get(name, 0)
            self._def_refs[name] = n + 1
            if n == 0:
                self._create_set(d)
        target = p.target_set()
        iso = self._iso_refs.setdefault(target, {})
        for direction in p.types:
            iso[direction] = iso.get(direction, 0) + 1
            if iso[direction] == 1:
                for e in list(self.elements[target]):
                    self._ref(ISO_SETS[direction], e, 1)
        ch.chains_changed = True
        for direction in p.types:
            ch.dirty_chains.add(p.chain(direction))
            ch.gone_chains.discard(p.chain(direction))

    def _release(self, p: Policy) -> None:
        ch = self._changes
        target = p.target_set()
        iso = self._iso_refs.get(target, {})
        for direction in p.types:
            iso[direction] -= 1
            c = p.chain(direction)
            if iso[direction] == 0:  # the last policy with this target and direction
                for e in list(self.elements[target]):
                    self._ref(ISO_SETS[direction], e, -1)
                ch.dirty_chains.discard(c)
                ch.gone_chains.add(c)
            else:
                ch.dirty_chains.add(c)
        ch.chains_changed = True
        for name in p.defs:
            self._def_refs[name] -= 1
            if self._def_refs[name] == 0:
                del self._def_refs[name]
                self._drop_set(name)

    def _create_set(self, d: SetDef) -> None:
        name = d.name
        ch = self._changes
        self.defs[name] = d
        self.set_kinds[name] = d.elem_kind
        self.elements[name] = {}
        ch.new_sets[name] = d.elem_kind
        ch.gone_sets.discard(name)  # dropped and re-created in one batch: the backend re-creates it empty
        if d.kind == "cidr":
            for e in d.cidrs:
                self._ref(name, e, 1)
            return
        self._plans[name] = (self._sid(d.target), tuple((self._sid(x.pod), self._sid(x.ns)) for x in d.peers))
        if d.uses_namespaces():
            self._ns_defs.add(name)
        for pk in self._candidates(d):
            self._apply(d, pk, self._eval(d, self.pods[pk]))

    def _drop_set(self, name: str) -> None:
        ch = self._changes
        for pk in self._members.pop(name, set()):
            self._contrib.pop((name, pk), None)
            s = self._by_pod.get(pk)
            if s is not None:
                s.discard(name)
        self._iso_refs.pop(name, None)
        self.defs.pop(name, None)
        self._plans.pop(name, None)
        self._ns_defs.discard(name)
        self.elements.pop(name, None)
        self.set_kinds.pop(name, None)
        ch.added.pop(name, None)
        ch.removed.pop(name, None)
        if name in ch.new_sets:
            del ch.new_sets[name]
        else:
            ch.gone_sets.add(name)

    def _candidates(self, d: SetDef) -> set[str]:
        """Pods that can be members (saves scanning every pod for namespace-scoped sets)."""
        if d.any_peer:
            return set(self.pods)
        out = set(self.pods_by_ns.get(d.namespace, ()))
        for peer in d.peers:
            if peer.ns is not None:
                for ns, labels in self.namespaces.items():
                    if peer.ns.matches(labels):
                        out |= self.pods_by_ns.get(ns, set())
        return out

    # ------------------------------------------------------------------ membership
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

    def _eval(self, d: SetDef, pod: PodInfo) -> frozenset[str]:
        """The elements `pod` puts into set `d` (empty: not a member)."""
        target_sid, peers = self._plans[d.name]
        if target_sid is not None:  # target pods, or the destinations of an ingress named port
            member = (pod.local and pod.namespace == d.namespace
                      and self._matches(target_sid, pod.labels, pod.lkey))
        elif d.any_peer:
            member = True
        else:
            member = False
            for pod_sid, ns_sid in peers:
                if ns_sid is None:
                    if pod.namespace != d.namespace:
                        continue
                else:
                    nkey = self._ns_lkey.get(pod.namespace)
                    if nkey is None or not self._matches(ns_sid, self.namespaces[pod.namespace], nkey):
                        continue
                if pod_sid is None or self._matches(pod_sid, pod.labels, pod.lkey):
                    member = True
                    break
        if not member:
            return frozenset()
        if d.kind != "named":
            return frozenset((pod.ip or "",))
        return frozenset(f"{pod.ip},{proto},{port}" for name, proto, port in pod.ports
                         if name == d.port_name and proto == d.proto)

    def _apply(self, d: SetDef, pod_key: str, new: frozenset[str]) -> None:
        name = d.name
        ck = (name, pod_key)
        old = self._contrib.get(ck, frozenset())
        if old == new:
            return
        iso = [ISO_SETS[x] for x, n in self._iso_refs.get(name, {}).items() if n > 0]
        for e in new - old:
            self._ref(name, e, 1)
            for s in iso:
                self._ref(s, e, 1)
        for e in old - new:
            self._ref(name, e, -1)
            for s in iso:
                self._ref(s, e, -1)
        if new:
            self._contrib[ck] = new
            self._by_pod.setdefault(pod_key, set()).add(name)
            self._members.setdefault(name, set()).add(pod_key)
        else:
            self._contrib.pop(ck, None)
            names = self._by_pod.get(pod_key)
            if names is not None:
                names.discard(name)
            m = self._members.get(name)
            if m is not None:
                m.discard(pod_key)

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

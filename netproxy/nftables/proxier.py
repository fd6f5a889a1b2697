"""The nftables backend: one nf_tables netlink batch (one transaction) per sync.

Full sync: create-delete-create the table and write everything (atomic replace,
which also repairs any drift). Partial sync: only the changed Service ports'
chains, affinity sets and map elements, element by element; its Python work is
proportional to the changed ports, never to the number of Services.
"""

from __future__ import annotations

import subprocess
from collections import Counter, defaultdict

from kernel import nftables as nl
from netproxy.model import ServicePortName
from netproxy.nftables import encode
from netproxy.nftables.plan import HAIRPIN, PortPlan, plan_port
from netproxy.proxier import NodeConfig, SyncResult
from netproxy.tracker import Changes, ProxyState


class NftablesProxier:
    """Blocking; call it from the proxy's netns worker thread (the socket binds to that netns)."""

    name = "nftables"

    def __init__(self, node: NodeConfig) -> None:
        self.node = node
        self.table = node.nft_table
        self.plans: dict[ServicePortName, PortPlan] = {}
        self._inputs: dict[ServicePortName, tuple] = {}  # spn -> ((port, endpoints), plan)
        self.hairpin: Counter[str] = Counter()  # endpoint IP -> picked ports using it (shared set elements)
        self._sock: nl.NftSocket | None = None

    def _plan(self, spn: ServicePortName, state: ProxyState) -> PortPlan:
        """Reuse the last plan when the port and its endpoints are unchanged (periodic resyncs)."""
        key = (state.services[spn], state.endpoints.get(spn, ()))
        cached = self._inputs.get(spn)
        if cached is not None and cached[0] == key:
            return cached[1]
        plan = plan_port(key[0], key[1], self.node)
        self._inputs[spn] = (key, plan)
        return plan

    def _socket(self) -> nl.NftSocket:
        if self._sock is None:
            self._sock = nl.NftSocket()
        return self._sock

    def sync(self, state: ProxyState, changes: Changes, full: bool) -> SyncResult:
        if full:
            return self._full(state)
        old: dict[ServicePortName, PortPlan] = {}
        new: dict[ServicePortName, PortPlan] = {}
        for spn in changes.ports:
            before = self.plans.get(spn)
            after = self._plan(spn, state) if spn in state.services else None
            if before != after:
                if before is not None:
                    old[spn] = before
                if after is not None:
                    new[spn] = after
        b = nl.Batch(self.table)
        partial(b, old, new)
        hairpin = _hairpin_delta(self.hairpin, old.values(), new.values())
        if hairpin[0]:
            b.del_elements(HAIRPIN, [encode.elem((HAIRPIN, ip), None) for ip in hairpin[0]])
        if hairpin[1]:
            b.add_elements(HAIRPIN, [encode.elem((HAIRPIN, ip), None) for ip in hairpin[1]])
        try:
            self._socket().send(b)
        except BaseException:
            _hairpin_delta(self.hairpin, new.values(), old.values())  # undo the refcounts: nothing applied
            raise
        for spn in changes.ports:
            if spn in new:
                self.plans[spn] = new[spn]
            elif spn not in state.services:
                self.plans.pop(spn, None)
                self._inputs.pop(spn, None)
        return SyncResult(full=False, rules=b.counts["rules"], chains=b.counts["chains"],
                          detail=f"{len(old.keys() | new.keys())} ports, {len(b)} messages")

    def _full(self, state: ProxyState) -> SyncResult:
        plans = {spn: self._plan(spn, state) for spn in state.services}
        b = nl.Batch(self.table)
        b.add_table()
        b.del_table()
        b.add_table()
        encode.skeleton(b, self.node)
        write_ports(b, plans.values())
        hairpin = Counter(ip for p in plans.values() for ip in p.hairpin)
        b.add_elements(HAIRPIN, [encode.elem((HAIRPIN, ip), None) for ip in hairpin])
        self._socket().send(b)
        self.plans, self.hairpin = plans, hairpin
        self._inputs = {spn: v for spn, v in self._inputs.items() if spn in plans}
        return SyncResult(full=True, rules=b.counts["rules"], chains=b.counts["chains"],
                          detail=f"{len(b)} messages, {b.counts['elements']} elements")

    def cleanup(self) -> None:
        b = nl.Batch(self.table)
        b.add_table()
        b.del_table()
        self._socket().send(b)
        self.plans, self._inputs, self.hairpin = {}, {}, Counter()
        if self._sock:
            self._sock.close()
            self._sock = None

    def list_ruleset(self) -> str:
        return subprocess.run(["nft", "list", "table", "ip", self.table], capture_output=True, text=True,
                              check=True).stdout


def write_ports(b: nl.Batch, plans) -> None:
    """Add ports' sets, chains, rules and elements (in that order, so every reference resolves)."""
    plans = list(plans)
    for p in plans:
        for name, timeout in p.sets.items():
            encode.add_affinity_set(b, name, timeout)
    for p in plans:
        for chain in p.chains:
            b.add_chain(chain)
    for p in plans:
        for chain, rules in p.chains.items():
            for r in rules:
                encode.add_rule(b, chain, r)
    by_map: dict[str, list[bytes]] = defaultdict(list)
    for p in plans:
        for key, verdict in p.elements.items():
            by_map[key[0]].append(encode.elem(key, verdict))
    for name, elems in by_map.items():
        b.add_elements(name, elems)


def partial(b: nl.Batch, old: dict[ServicePortName, PortPlan], new: dict[ServicePortName, PortPlan]) -> None:
    """Messages turning `old` into `new` for these ports only (element- and chain-level)."""
    old_chains = {c: r for p in old.values() for c, r in p.chains.items()}
    new_chains = {c: r for p in new.values() for c, r in p.chains.items()}
    old_sets = {n: t for p in old.values() for n, t in p.sets.items()}
    new_sets = {n: t for p in new.values() for n, t in p.sets.items()}
    old_elems = {k: v for p in old.values() for k, v in p.elements.items()}
    new_elems = {k: v for p in new.values() for k, v in p.elements.items()}
    for name, timeout in new_sets.items():
        if name not in old_sets:
            encode.add_affinity_set(b, name, timeout)
    for chain in new_chains:
        if chain not in old_chains:
            b.add_chain(chain)
    for chain, rules in new_chains.items():
        if old_chains.get(chain) != rules:
            if chain in old_chains:
                b.flush_chain(chain)
            for r in rules:
                encode.add_rule(b, chain, r)
    dels: dict[str, list[bytes]] = defaultdict(list)
    adds: dict[str, list[bytes]] = defaultdict(list)
    for key, data in old_elems.items():
        if key not in new_elems or new_elems[key] != data:
            dels[key[0]].append(encode.elem(key, data, with_data=False))
    for key, data in new_elems.items():
        if key not in old_elems or old_elems[key] != data:
            adds[key[0]].append(encode.elem(key, data))
    for name, elems in dels.items():
        b.del_elements(name, elems)
    for name, elems in adds.items():
        b.add_elements(name, elems)
    stale = [c for c in old_chains if c not in new_chains]
    for chain in stale:
        b.flush_chain(chain)
    for chain in stale:
        b.del_chain(chain)
    for name in old_sets:
        if name not in new_sets:
            b.del_set(name)


def _hairpin_delta(refs: Counter[str], removed, added) -> tuple[list[str], list[str]]:
    """Apply picked ports' endpoint IPs leaving/arriving to the refcounts: (IPs now unused, IPs newly
    used)."""
    start: dict[str, int] = {}
    for plans, step in ((removed, -1), (added, 1)):
        for p in plans:
            for ip in p.hairpin:
                start.setdefault(ip, refs[ip])
                refs[ip] += step
    gone = [ip for ip, n in start.items() if n > 0 and refs[ip] <= 0]
    fresh = [ip for ip, n in start.items() if n <= 0 and refs[ip] > 0]
    for ip in gone:
        del refs[ip]
    return gone, fresh

"""The nftables backend: one nf_tables netlink batch (one transaction) per sync.

Full sync: create-delete-create the table and write everything (atomic replace,
which also repairs any drift). Partial sync: only the changed Service ports'
chains, affinity sets and map elements, element by element.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict

from netproxy.model import ServicePortName
from netproxy.nftables import encode
from netproxy.nftables import netlink as nl
from netproxy.nftables.plan import PortPlan, plan_port
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
        new = dict(self.plans)
        for spn in changes.ports:
            if spn not in state.services:
                new.pop(spn, None)
            else:
                new[spn] = self._plan(spn, state)
        b = nl.Batch(self.table)
        changed = [spn for spn in changes.ports if self.plans.get(spn) != new.get(spn)]
        partial(b, {s: self.plans[s] for s in changed if s in self.plans}, {s: new[s] for s in changed if s in new})
        self._socket().send(b)
        self.plans = new
        for spn in changes.ports:
            if spn not in new:
                self._inputs.pop(spn, None)
        return SyncResult(full=False, rules=b.counts["rules"], chains=b.counts["chains"],
                          detail=f"{len(changed)} ports, {len(b)} messages")

    def _full(self, state: ProxyState) -> SyncResult:
        plans = {spn: self._plan(spn, state) for spn in state.services}
        b = nl.Batch(self.table)
        b.add_table()
        b.del_table()
        b.add_table()
        encode.skeleton(b, self.node)
        write_ports(b, plans.values())
        self._socket().send(b)
        self.plans = plans
        self._inputs = {spn: v for spn, v in self._inputs.items() if spn in plans}
        return SyncResult(full=True, rules=b.counts["rules"], chains=b.counts["chains"],
                          detail=f"{len(b)} messages, {b.counts['elements']} elements")

    def cleanup(self) -> None:
        b = nl.Batch(self.table)
        b.add_table()
        b.del_table()
        self._socket().send(b)
        self.plans, self._inputs = {}, {}
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
    for key, verdict in old_elems.items():
        if new_elems.get(key) != verdict:
            dels[key[0]].append(encode.elem(key, None))
    for key, verdict in new_elems.items():
        if old_elems.get(key) != verdict:
            adds[key[0]].append(encode.elem(key, verdict))
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

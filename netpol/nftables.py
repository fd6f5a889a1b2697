"""The nftables backend: one `ip` table with named sets, written as atomic `nft -f` transactions.

    chain forward (hook forward, priority filter): ct established,related accept; clear our mark bits;
        jump egress; jump ingress
    chain ingress: ip daddr @t_<policy> jump i_<policy> …; ip daddr @ing_iso, no ingress mark → reject
    chain i_<policy>: peer/port matches → meta mark |= ingress bit

Same layout and marks as the iptables backend. A full sync deletes and recreates the table in one
`nft -f` transaction (no window without rules); policy changes are `nft -f` scripts too. The hot path,
a pod or namespace label change, is element-only: it goes out as one hand-built nf_tables netlink batch
(netproxy's encoder), without the nft CLI's whole-ruleset fetch on every call.
Our own table is independent of other tables' verdicts (a service proxy's accept elsewhere does not
skip it). Blocking: call from the enforcer's netns worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kernel import nftables as nl
from netpol.iptables import MARK_EGRESS, MARK_INGRESS, BackendError, run
from netpol.model import INGRESS, ISO_SETS, Changes, Line, PolicyModel

log = logging.getLogger("netpol.nftables")

_TYPES = {"ip": "type ipv4_addr;", "net": "type ipv4_addr; flags interval;",
          "ipport": "type ipv4_addr . inet_proto . inet_service;"}


class NftablesBackend:
    name = "nftables"

    def __init__(self, table: str = "nodeagent-netpol") -> None:
        self.table = table
        self.t = f"ip {table}"
        self._sock: nl.NftSocket | None = None  # opened on the worker thread, so in its netns

    @staticmethod
    def set_name(name: str) -> str:
        return name.replace("-", "_").lower()

    @staticmethod
    def chain_name(name: str) -> str:
        return name.replace("-", "_").lower()

    @staticmethod
    def _elem(kind: str, e: str) -> str:
        if kind == "ipport":
            ip, proto, port = e.split(",")
            return f"{ip} . {proto} . {port}"
        return e

    def _elements(self, kind: str, elems: Iterable[str]) -> list[str]:
        return [self._elem(kind, e) for e in sorted(elems)]

    # ------------------------------------------------------------------ sync
    def sync(self, model: PolicyModel, ch: Changes) -> None:
        if not (ch.full or ch.new_sets or ch.gone_sets or ch.chains_changed):
            self._elements_batch(model, ch)
            return
        script = self._full(model) if ch.full else self._incremental(model, ch)
        if script:
            self._nft(script)

    @staticmethod
    def _key(kind: str, e: str) -> bytes:
        if kind == "ipport":
            ip, proto, port = e.split(",")
            return nl.ip4(ip) + nl.proto_key(proto.upper()) + nl.port_key(int(port))
        return nl.ip4(e)

    def _elements_batch(self, model: PolicyModel, ch: Changes) -> None:
        b = nl.Batch(self.table)
        for changes, add in ((ch.removed, False), (ch.added, True)):
            for name, elems in changes.items():
                kind = model.set_kinds.get(name)
                if not elems or kind is None:
                    continue
                if kind == "net":  # interval sets change only with their policy (never here)
                    raise BackendError(f"element update of interval set {name}")
                keys = [nl.element(self._key(kind, e)) for e in sorted(elems)]
                (b.add_elements if add else b.del_elements)(self.set_name(name), keys)
        if not b.msgs:
            return
        if self._sock is None:
            self._sock = nl.NftSocket()
        self._sock.send(b)

    def _full(self, model: PolicyModel) -> str:
        out = [f"add table {self.t}", f"delete table {self.t}", f"add table {self.t}"]
        for name, kind in sorted(model.set_kinds.items()):
            out += self._add_set(name, kind, model.elements.get(name, {}))
        chains = self._all_chains(model)
        out.append(f"add chain {self.t} forward "
                   "{ type filter hook forward priority filter; policy accept; }")
        for c in chains:
            if c != "forward":
                out.append(f"add chain {self.t} {c}")
        for c, rules in chains.items():
            out += [f"add rule {self.t} {c} {r}" for r in rules]
        return "\n".join(out) + "\n"

    def _add_set(self, name: str, kind: str, elems: Iterable[str]) -> list[str]:
        n = self.set_name(name)
        out = [f"add set {self.t} {n} {{ {_TYPES[kind]} }}", f"flush set {self.t} {n}"]
        els = self._elements(kind, elems)
        for i in range(0, len(els), 2000):
            out.append(f"add element {self.t} {n} {{ {', '.join(els[i:i + 2000])} }}")
        return out

    def _incremental(self, model: PolicyModel, ch: Changes) -> str:
        out: list[str] = []
        for name, kind in sorted(ch.new_sets.items()):
            out += self._add_set(name, kind, model.elements.get(name, {}))
        for name, elems in ch.removed.items():
            if elems and name not in ch.new_sets and name in model.set_kinds:
                out.append(f"delete element {self.t} {self.set_name(name)} "
                           f"{{ {', '.join(self._elements(model.set_kinds[name], elems))} }}")
        for name, elems in ch.added.items():
            if elems and name not in ch.new_sets and name in model.set_kinds:
                out.append(f"add element {self.t} {self.set_name(name)} "
                           f"{{ {', '.join(self._elements(model.set_kinds[name], elems))} }}")
        if ch.chains_changed:
            chains = self._all_chains(model)
            for c in sorted(ch.dirty_chains):
                cn = self.chain_name(c)
                out += [f"add chain {self.t} {cn}", f"flush chain {self.t} {cn}"]
                out += [f"add rule {self.t} {cn} {r}" for r in chains.get(cn, [])]
            for d in ("ingress", "egress"):
                out.append(f"flush chain {self.t} {d}")
                out += [f"add rule {self.t} {d} {r}" for r in chains[d]]
            for c in sorted(ch.gone_chains):
                out.append(f"delete chain {self.t} {self.chain_name(c)}")
        for name in sorted(ch.gone_sets):
            out.append(f"delete set {self.t} {self.set_name(name)}")
        return "\n".join(out) + "\n" if out else ""

    # ------------------------------------------------------------------ rules
    def _all_chains(self, model: PolicyModel) -> dict[str, list[str]]:
        clear = 0xFFFFFFFF ^ (MARK_INGRESS | MARK_EGRESS)
        chains: dict[str, list[str]] = {
            "forward": ["ct state established,related accept", f"meta mark set meta mark & {clear:#x}",
                        "jump egress", "jump ingress"],
            "ingress": [], "egress": [],
        }
        for p in model.ordered_policies():
            for d in p.types:
                me = "daddr" if d == INGRESS else "saddr"
                chain = self.chain_name(p.chain(d))
                disp = "ingress" if d == INGRESS else "egress"
                if chain not in chains:
                    chains[disp].append(f"ip {me} @{self.set_name(p.target_set())} jump {chain}")
                    chains[chain] = []
                mark = MARK_INGRESS if d == INGRESS else MARK_EGRESS
                chains[chain] += [self._line(d, ln, mark) for ln in p.lines.get(d, [])]
        for d, iso in ISO_SETS.items():
            me = "daddr" if d == INGRESS else "saddr"
            mark = MARK_INGRESS if d == INGRESS else MARK_EGRESS
            disp = "ingress" if d == INGRESS else "egress"
            chains[disp].append(f"ip {me} @{self.set_name(iso)} meta mark & {mark:#x} == 0 "
                                f"reject with icmp type admin-prohibited")
        return chains

    def _line(self, direction: str, ln: Line, mark: int) -> str:
        peer = "saddr" if direction == INGRESS else "daddr"
        parts = []
        if ln.peer_set:
            parts.append(f"ip {peer} @{self.set_name(ln.peer_set)}")
        pm = ln.port
        if pm is not None:
            if pm.named_set:
                parts.append(f"ip daddr . meta l4proto . th dport @{self.set_name(pm.named_set)}")
            elif pm.port is not None:
                rng = f"{pm.port}-{pm.end_port}" if pm.end_port else str(pm.port)
                parts.append(f"meta l4proto {pm.protocol} th dport {rng}")
            else:
                parts.append(f"meta l4proto {pm.protocol}")
        parts.append(f"meta mark set meta mark | {mark:#x}")
        return " ".join(parts)

    # ------------------------------------------------------------------ kernel
    def _nft(self, script: str) -> None:
        try:
            run(["nft", "-f", "-"], script)
        except BackendError as e:
            log.debug("nft script failed:\n%s", script[:4000])
            raise e

    def leftovers(self) -> list[str]:
        out = run(["nft", "list", "tables"], check=False)
        return [ln.strip() for ln in out.splitlines() if ln.strip() == f"table {self.t}"]

    def cleanup(self) -> None:
        self._nft(f"add table {self.t}\ndelete table {self.t}\n")
        if self._sock is not None:
            self._sock.close()
            self._sock = None

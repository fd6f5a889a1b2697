"""The iptables backend: filter-table chains NODEAGENT-NP-* matching ipsets.

    FORWARD (position 1) → NODEAGENT-NP-FORWARD
        ESTABLISHED,RELATED → RETURN (replies of allowed flows)
        clear our two mark bits; → NODEAGENT-NP-EGRESS; → NODEAGENT-NP-INGRESS
    NODEAGENT-NP-INGRESS: dst in T-<policy> → NODEAGENT-NP-I-<policy> (which ORs the ingress mark on a match);
        dst isolated for ingress and no ingress mark → REJECT (icmp admin-prohibited); likewise egress on src.

Selector results live in ipsets (hash:ip, hash:net for ipBlocks, hash:ip,port for named ports), so a
label change is an `ipset restore` of a few add/del lines; chains are written (iptables-restore --noflush,
only the chains named) when policies change. Blocking: call from the enforcer's netns worker thread.
"""

from __future__ import annotations

import logging
import shutil
import subprocess

from netpol.model import EGRESS, INGRESS, ISO_SETS, Changes, Line, PolicyModel

log = logging.getLogger("netpol.iptables")

MARK_INGRESS, MARK_EGRESS = 0x10000, 0x20000
_IPSET_TYPES = {"ip": "hash:ip", "net": "hash:net", "ipport": "hash:ip,port"}


class BackendError(RuntimeError):
    pass


def run(argv: list[str], stdin: str | None = None, check: bool = True) -> str:
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if check and p.returncode != 0:
        raise BackendError(f"{' '.join(argv[:3])} failed ({p.returncode}): {p.stderr.strip()[:2000]}")
    return p.stdout


class IptablesBackend:
    name = "iptables"

    def __init__(self, chain_prefix: str = "NODEAGENT-NP", set_prefix: str = "NA-NP-",
                 backend: str | None = None) -> None:
        if backend is None:  # the node's one backend, shared with Service rules and the CNI plugins
            from kernel import iptables

            backend = iptables.backend()
        self.cmd = "iptables-legacy" if backend == "legacy" else "iptables-nft"
        if not shutil.which(self.cmd):
            self.cmd = "iptables"
        self.cp = chain_prefix
        self.sp = set_prefix
        self.forward = f"{chain_prefix}-FORWARD"
        self.dispatch = {INGRESS: f"{chain_prefix}-INGRESS", EGRESS: f"{chain_prefix}-EGRESS"}

    # ------------------------------------------------------------------ names
    def set_name(self, name: str) -> str:
        return self.sp + name

    def chain_name(self, name: str) -> str:
        return f"{self.cp}-{name}"

    @staticmethod
    def _elem(kind: str, e: str) -> str:
        if kind == "ipport":
            ip, proto, port = e.split(",")
            return f"{ip},{proto}:{port}"
        return e

    # ------------------------------------------------------------------ sync
    def sync(self, model: PolicyModel, ch: Changes) -> None:
        if ch.full:
            self._full(model)
        else:
            self._incremental(model, ch)

    def _full(self, model: PolicyModel) -> None:
        lines = []
        for name, kind in sorted(model.set_kinds.items()):
            real = self.set_name(name)
            tmp = real[:30] + "~"
            lines += [f"create {real} {_IPSET_TYPES[kind]} -exist",
                      f"create {tmp} {_IPSET_TYPES[kind]} -exist", f"flush {tmp}"]
            lines += [f"add {tmp} {self._elem(kind, e)} -exist" for e in sorted(model.elements.get(name, {}))]
            lines += [f"swap {tmp} {real}", f"destroy {tmp}"]
        self._ipset(lines)
        existing = self._our_chains()
        chains = self._all_chains(model)
        self._restore(chains, existing - set(chains) - {self.forward, *self.dispatch.values()})
        self._ensure_jump()
        wanted = {self.set_name(n) for n in model.set_kinds}
        stale = [s for s in self._our_sets() if s not in wanted]
        if stale:
            self._ipset([f"destroy {s}" for s in stale])

    def _incremental(self, model: PolicyModel, ch: Changes) -> None:
        lines = []
        for name, kind in sorted(ch.new_sets.items()):
            real = self.set_name(name)
            lines += [f"create {real} {_IPSET_TYPES[kind]} -exist", f"flush {real}"]
            lines += [f"add {real} {self._elem(kind, e)} -exist"
                      for e in sorted(model.elements.get(name, {}))]
        for name, elems in ch.removed.items():
            if name in ch.new_sets or name not in model.set_kinds:
                continue
            kind = model.set_kinds[name]
            lines += [f"del {self.set_name(name)} {self._elem(kind, e)} -exist" for e in elems]
        for name, elems in ch.added.items():
            if name in ch.new_sets or name not in model.set_kinds:
                continue
            kind = model.set_kinds[name]
            lines += [f"add {self.set_name(name)} {self._elem(kind, e)} -exist" for e in elems]
        if lines:
            self._ipset(lines)
        if ch.chains_changed:
            all_chains = self._all_chains(model)
            wanted = {self.chain_name(c) for c in ch.dirty_chains} | set(self.dispatch.values())
            self._restore({k: v for k, v in all_chains.items() if k in wanted},
                          {self.chain_name(c) for c in ch.gone_chains})
            self._ensure_jump()
        if ch.gone_sets:
            self._ipset([f"destroy {self.set_name(s)}" for s in sorted(ch.gone_sets)], check=False)

    # ------------------------------------------------------------------ rules
    def _all_chains(self, model: PolicyModel) -> dict[str, list[str]]:
        f = self.forward
        chains: dict[str, list[str]] = {
            f: [f"-A {f} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
                f"-A {f} -j MARK --and-mark {0xFFFFFFFF ^ (MARK_INGRESS | MARK_EGRESS):#x}",
                f"-A {f} -j {self.dispatch[EGRESS]}",
                f"-A {f} -j {self.dispatch[INGRESS]}"],
            self.dispatch[INGRESS]: [], self.dispatch[EGRESS]: [],
        }
        for p in model.ordered_policies():
            for d in p.types:
                me = "dst" if d == INGRESS else "src"
                chain = self.chain_name(p.chain(d))
                if chain not in chains:
                    target = self.set_name(p.target_set())
                    chains[self.dispatch[d]].append(
                        f"-A {self.dispatch[d]} -m set --match-set {target} {me} -j {chain}")
                    chains[chain] = []
                mark = MARK_INGRESS if d == INGRESS else MARK_EGRESS
                chains[chain] += [self._line(chain, d, ln, mark) for ln in p.lines.get(d, [])]
        for d, iso in ISO_SETS.items():
            me = "dst" if d == INGRESS else "src"
            mark = MARK_INGRESS if d == INGRESS else MARK_EGRESS
            chains[self.dispatch[d]].append(
                f"-A {self.dispatch[d]} -m set --match-set {self.set_name(iso)} {me} -m mark ! --mark "
                f"{mark:#x}/{mark:#x} -m comment --comment \"networkpolicy {d.lower()} isolation\" "
                f"-j REJECT --reject-with icmp-admin-prohibited")
        return chains

    def _line(self, chain: str, direction: str, ln: Line, mark: int) -> str:
        peer = "src" if direction == INGRESS else "dst"
        parts = [f"-A {chain}"]
        if ln.peer_set:
            parts.append(f"-m set --match-set {self.set_name(ln.peer_set)} {peer}")
        pm = ln.port
        if pm is not None:
            parts.append(f"-p {pm.protocol}")
            if pm.named_set:
                parts.append(f"-m set --match-set {self.set_name(pm.named_set)} dst,dst")
            elif pm.port is not None:
                rng = f"{pm.port}:{pm.end_port}" if pm.end_port else str(pm.port)
                parts.append(f"-m {pm.protocol} --dport {rng}")
        parts.append(f"-j MARK --or-mark {mark:#x}")
        return " ".join(parts)

    # ------------------------------------------------------------------ kernel
    def _ipset(self, lines: list[str], check: bool = True) -> None:
        run(["ipset", "restore"], "\n".join(lines) + "\n", check=check)

    def _restore(self, chains: dict[str, list[str]], delete: set[str]) -> None:
        out = ["*filter"]
        out += [f":{c} - [0:0]" for c in chains]
        out += [f":{c} - [0:0]" for c in sorted(delete) if c not in chains]
        for rules in chains.values():
            out += rules
        out += [f"-X {c}" for c in sorted(delete) if c not in chains]
        out.append("COMMIT")
        run([f"{self.cmd}-restore", "-w", "--noflush"], "\n".join(out) + "\n")

    def _ensure_jump(self) -> None:
        """Our jump first in FORWARD: a service proxy's ACCEPT of marked traffic must not skip policy."""
        rules = [r for r in run([self.cmd, "-w", "-S", "FORWARD"]).splitlines() if r.startswith("-A FORWARD")]
        mine = f"-A FORWARD -j {self.forward}"
        at = [i for i, r in enumerate(rules) if r == mine]
        if at == [0]:
            return
        self._delete_jumps()
        run([self.cmd, "-w", "-I", "FORWARD", "1", "-j", self.forward])

    def _delete_jumps(self) -> None:
        for _ in range(64):
            p = subprocess.run([self.cmd, "-w", "-D", "FORWARD", "-j", self.forward], capture_output=True,
                               check=False)
            if p.returncode != 0:
                return

    def _our_chains(self) -> set[str]:
        out = run([f"{self.cmd}-save", "-t", "filter"], check=False)
        return {ln[1:].split()[0] for ln in out.splitlines() if ln.startswith(f":{self.cp}-")}

    def _our_sets(self) -> list[str]:
        out = run(["ipset", "list", "-n"], check=False)
        return [s for s in out.split() if s.startswith(self.sp)]

    # ------------------------------------------------------------------ cleanup
    def leftovers(self) -> list[str]:
        """Every chain, FORWARD jump and ipset of ours still in the kernel (tests assert this is empty)."""
        jumps = [r for r in run([self.cmd, "-w", "-S", "FORWARD"], check=False).splitlines()
                 if f"-j {self.forward}" in r]
        return sorted(self._our_chains()) + jumps + self._our_sets()

    def cleanup(self) -> None:
        self._delete_jumps()
        chains = self._our_chains()
        if chains:
            names = sorted(chains)
            out = ["*filter", *(f":{c} - [0:0]" for c in names), *(f"-X {c}" for c in names)]
            run([f"{self.cmd}-restore", "-w", "--noflush"], "\n".join(out + ["COMMIT"]) + "\n")
        sets = self._our_sets()
        if sets:
            self._ipset([f"destroy {s}" for s in sets], check=False)

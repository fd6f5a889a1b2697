"""The iptables backend: one iptables-restore transaction per sync (legacy x_tables by default).

Backend choice (measured, see bench/netproxy_sync.py): legacy x_tables load a
full kube-proxy ruleset ~20x faster than iptables-nft-restore (2.9 s vs 56 s at
10k Services), so `backend="legacy"` is the default; its rules show in
`iptables-legacy-save`. `backend="nft"` writes through iptables-nft (shown by
`iptables-save` on Debian 12) and makes one-Service changes cheap instead.
Small changes can go through python-iptables (libiptc, legacy only) with
`incremental="libiptc"`.
"""

from __future__ import annotations

import logging
import subprocess

from netproxy.iptables.plan import (
    FILTER,
    NAT,
    Names,
    PortRules,
    fixed_chains,
    full_restore,
    jump_rules,
    partial_restore,
    plan_port,
)
from netproxy.model import ServicePortName
from netproxy.proxier import NodeConfig, SyncResult
from netproxy.tracker import Changes, ProxyState

log = logging.getLogger("netproxy.iptables")


class IptablesError(RuntimeError):
    pass


def _run(argv: list[str], stdin: str | None = None) -> str:
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise IptablesError(f"{' '.join(argv[:3])}... failed ({p.returncode}): {p.stderr.strip()[:2000]}")
    return p.stdout


class IptablesProxier:
    """Blocking; call it from the proxy's netns worker thread."""

    name = "iptables"

    def __init__(self, node: NodeConfig, backend: str = "legacy", incremental: str = "restore") -> None:
        if backend not in ("legacy", "nft"):
            raise ValueError("backend must be legacy or nft")
        if incremental not in ("restore", "libiptc"):
            raise ValueError("incremental must be restore or libiptc")
        if incremental == "libiptc" and backend != "legacy":
            raise ValueError("python-iptables (libiptc) writes legacy x_tables only")
        self.node = node
        self.backend = backend
        self.incremental = incremental
        self.cmd = f"iptables-{backend}"
        self.names = Names(node.prefix)
        self.plans: dict[ServicePortName, PortRules] = {}
        self._libiptc = None

    # -- reading the kernel --------------------------------------------------------------------
    def save(self, table: str) -> str:
        return _run([f"{self.cmd}-save", "-t", table])

    def _existing(self) -> tuple[set[str], set[tuple[str, str, str]]]:
        """Our chains in nat, and which builtin-chain hooks are present (one save per table)."""
        chains: set[str] = set()
        present: set[tuple[str, str, str]] = set()
        wanted = jump_rules(self.node)
        for table in (NAT, FILTER):
            text = self.save(table)
            lines = text.splitlines()
            if table == NAT:
                chains = {ln[1:].split()[0] for ln in lines if ln.startswith(":") and self.names.owns(ln[1:])}
            rules = set(lines)
            for t, chain, spec in wanted:
                if t == table and _normalize(f"-A {chain} {spec}") in {_normalize(r) for r in rules
                                                                       if r.startswith(f"-A {chain} ")}:
                    present.add((t, chain, spec))
        return chains, present

    # -- syncing -------------------------------------------------------------------------------
    def plan_all(self, state: ProxyState) -> dict[ServicePortName, PortRules]:
        return {spn: plan_port(sp, state.endpoints.get(spn, ()), self.node) for spn, sp in state.services.items()}

    def sync(self, state: ProxyState, changes: Changes, full: bool) -> SyncResult:
        if full or not self.plans and not state.services:
            return self._full(state)
        new = dict(self.plans)
        for spn in changes.ports:
            sp = state.services.get(spn)
            if sp is None:
                new.pop(spn, None)
            else:
                new[spn] = plan_port(sp, state.endpoints.get(spn, ()), self.node)
        if self.incremental == "libiptc":
            from netproxy.iptables.libiptc import apply_partial

            n = apply_partial(self.plans, new, changes.ports, self.node)
        else:
            text = partial_restore(self.plans, new, changes.ports)
            n = text.count("\n-A ") + text.count("\n-I ")
            if text:
                _run([f"{self.cmd}-restore", "-w", "--noflush"], text)
        self.plans = new
        return SyncResult(full=False, rules=n, detail=f"{len(changes.ports)} ports")

    def _full(self, state: ProxyState) -> SyncResult:
        plans = self.plan_all(state)
        existing, present = self._existing()
        wanted_chains = {c for p in plans.values() for c in p.chains} | set(fixed_chains(self.node)[NAT])
        stale = sorted(c for c in existing if c not in wanted_chains)
        missing = [j for j in jump_rules(self.node) if j not in present]
        text = full_restore(plans, self.node, stale, missing)
        _run([f"{self.cmd}-restore", "-w", "--noflush"], text)
        self.plans = plans
        rules = text.count("\n-A ") + text.count("\n-I ")
        return SyncResult(full=True, rules=rules, chains=text.count("\n:"))

    def cleanup(self) -> None:
        """Remove every chain and hook we own (kube-proxy --cleanup)."""
        existing, present = self._existing()
        out = []
        for table in (FILTER, NAT):
            ours = set(fixed_chains(self.node)[table]) | (existing if table == NAT else set())
            out.append(f"*{table}")
            for t, chain, spec in present:
                if t == table:
                    out.append(f"-D {chain} {spec}")
            live = sorted(c for c in ours if c in self._chains_in(table))
            out.extend(f":{c} - [0:0]" for c in live)
            out.extend(f"-X {c}" for c in live)
            out.append("COMMIT")
        _run([f"{self.cmd}-restore", "-w", "--noflush"], "\n".join(out) + "\n")
        self.plans = {}

    def _chains_in(self, table: str) -> set[str]:
        return {ln[1:].split()[0] for ln in self.save(table).splitlines() if ln.startswith(":")}


def _normalize(rule: str) -> str:
    """iptables-save spells a rule in its own canonical order; compare by sorted tokens."""
    return " ".join(sorted(rule.replace('"', "").split()))

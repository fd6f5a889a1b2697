"""The iptables mode on nf_tables: iptables-nft's own rules, written in process over netlink.

kube-proxy's layout (plan.py) is turned into exactly what iptables-nft would put
in the kernel (nftrules.py: same tables `ip nat`/`ip filter`, same base chains and
priorities, native expressions where iptables-nft uses them, xt compat matches and
targets elsewhere; two departures iptables-nft reads back as the same rules: no
per-rule counter unless `counters`, and a bare `-m tcp`/`-m udp` as native
`th dport 0-65535`, both cheaper for the kernel), so `iptables-save` (iptables-nft)
shows the rules and iptables-nft can still edit the same tables. Why not iptables-nft-restore: its
full load is superlinear in user space (56 s at 10k Services); why not legacy
x_tables: every change there is a whole-table replace (~0.3-0.5 s at 10k).

- Full sync: one nf_tables transaction (both tables): create/flush every chain we
  own, append every rule, drop stale chains. Each dispatch chain's rules go as one
  contiguous run of messages whose first and last are echoed (NLM_F_ECHO): the kernel
  gives a table's new rules consecutive handles in message order, so a run of n rules
  whose ends are n - 1 apart holds first..last in order (else, a dump of that chain's
  handles; 0.3 s at 10k, which the echo saves).
  Chains the kernel does not have yet (the initial load, or >= CHUNK new ports) are
  first created and filled in transactions of CHUNK ports, sent by a writer thread
  (nftwriter.py) while this one plans and encodes the next chunk (sendmsg releases the GIL): nothing
  references them until the last transaction, so traffic sees the old ruleset or the
  whole new one, and a failed chunk leaves only unreferenced chains that the next full
  sync (which then reads the kernel's chains) refills or deletes. Resyncs may also
  rewrite whole Services in chunks (resync_chunk: a port whose dispatch rules are
  unchanged gets all its chains flushed and refilled in one chunk); off by default.
- One-Service change: one transaction with only the changed chains flushed and
  refilled, chains added/deleted, and the dispatch rules deleted by handle or
  inserted with NLM_F_ECHO (the kernel returns the new handles).

Measured (bench/netproxy_sync.py, 10k Services x 3 endpoints, 110k rules, this 2-core KVM machine
shared with other sessions' VMs, load 3-4.4, 2026-11-23, alternating with the code before these
measures in the same minutes): full sync 2.9-4.5 s wall (one outlier 5.7 s), 1.1-1.8x the
iptables-legacy-restore of the same ruleset right after it (2.1-3.1 s; median ratio 1.43), against
5.0-7.1 s and 2.0-2.5x before; CPU 3.0-4.0 s against the restore's 1.9-2.6 s (before: 4.2-4.9 s).
At load 1.1 (a free second core): 2.64 s chunked against 2.23 s (1.18x; one transaction 4.03 s),
the code before 3.50 s (1.42 s adjacent floor, 2.22 s in its floors line) and 5.22 s in one
transaction. With a free core the chunked load is kernel-bound: its wall is about the kernel's
CPU (2.1-2.3 s) plus the first chunk's encoding and the last transaction's Python.
Of that CPU the kernel's nf_tables commit is 1.7-2.3 s, i.e. about the restore's whole cost (perf:
half of nf_tables_newrule is the expression-type lookup, which compares every expression's name
with every registered type; then allocation, xt checkentry, percpu counters), and Python 1.0-1.7 s
(planning ~0.45 s, rule bodies ~0.45 s, chain messages and framing ~0.2 s; more in CPU time when
the writer thread commits beside it). What made the Python side cheaper: rule bodies spliced from
per-shape templates (nftrules.body), appended per chain with the chain's header built once, the
batch in 1 MiB segments (regrowing one 40 MB bytearray copied it ~20 times), no cyclic GC during
the load (~0.4 s), dispatch handles from echoed runs instead of a dump (0.3 s), dispatch bodies
encoded while the chunks commit.

A one-Service change is the kernel's: one transaction (both tables), our Python ~1 ms of it. A
transaction adding a rule with any expression that has a ->validate op (immediate verdicts, xt
matches and targets: every rule iptables writes) marks the table for validation, and the commit
walks every chain reachable from its base chains; only deletions skip it (del p50 10-20 ms). Cost
model (10k Services x 3 endpoints, 40k chains, 110k rules; CPU of a one-rule nat commit, load 6-9,
bench/ipt_validate.py and a synthetic table of 100k rules): ~5 ms O(chains) per commit (the
generation swap walks every chain); with validation ~9 ms more O(chains) (the per-chain
memo is reset on every chain) plus one walk of the KUBE-SERVICES tree per base hook reaching it,
as 6.18 memoizes validated chains per (chain type, hook): PREROUTING and OUTPUT (0 hooks 13 ms, 1: 49-52,
2: 79-84). A walk costs per rule visited (~30-60 ns, each expression ~10 ns native, ~30 ns counter),
per chain entered (~200 ns) and per xt compat match/target (~0.2-0.5 us: nft_compat's hook check;
half of the walk at 10k: comment, statistic, DNAT and, before, the bare `-m tcp` of each KUBE-SEP).
Layout-preserving cuts measured (alternated, same minutes): the bare `-m tcp` as native `th dport
0-65535` (nftrules._l4_bare) -10 to -12 ms, no per-rule counter (nftrules.use_counters) -4 to -7 ms:
the one-Service change 86-93 -> 70-78 ms CPU at 10k. Measured but not taken: comments as rule
userdata (what nft itself uses) -20 ms, but iptables-nft prints them after the other matches and
`iptables -C/-D` with kube-proxy's spec no longer finds the rule. Under load the wall is the CPU
plus the scheduler's share: ~1.4-1.9x at load 6-9 on these 2 cores.

Chunked initial load vs one transaction (same runs, alternating): chunked 2.9-5.7 s, one
transaction 3.65-6.3 s; the chunked load wins (down to 2.9-3.1 s) when the second core is free and
loses when the machine is busy, at ~0.3-0.5 s more CPU of this thread. Kept from two chunks' worth
of ports up; below that one transaction (a lone chunk overlaps nothing: 0.48 s against 0.31 s at
1k). Resyncs rewriting whole Services in chunks (resync_chunk 2500-5000) measured no better than
one transaction (3.2-3.9 s against 3.0-3.9 s at load 5-7, before these measures; 10 chunks of 1000
cost ~+1 s CPU, a whole-table validation walk per chunk), hence off.

Blocking: call it from the proxy's netns worker thread (the socket lives in that netns); the
chunks' writer thread shares that socket (bound in the same netns) and is joined before returning.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterable, Mapping, Sequence

from kernel import nftables as nl
from netproxy.iptables.nftrules import body, encode, use_counters
from netproxy.iptables.nftwriter import Writer
from netproxy.iptables.plan import (
    FILTER,
    NAT,
    Names,
    PortRules,
    base_rules,
    fixed_chains,
    jump_rules,
    large_cluster,
    partial_ops,
    plan_port,
)
from netproxy.model import ServicePortName
from netproxy.proxier import NodeConfig, SyncResult
from netproxy.tracker import Changes, ProxyState

log = logging.getLogger("netproxy.iptables.nft")

# iptables-nft's base chains: (hook number, priority, chain type)
BUILTIN = {
    FILTER: {"INPUT": (1, 0, "filter"), "FORWARD": (2, 0, "filter"), "OUTPUT": (3, 0, "filter")},
    NAT: {"PREROUTING": (0, -100, "nat"), "INPUT": (1, 100, "nat"), "OUTPUT": (3, -100, "nat"),
          "POSTROUTING": (4, 100, "nat")},
}


def _jump_target(rule: dict[int, bytes]) -> str | None:
    """The chain an (iptables-style) rule jumps to, from its last `immediate` expression."""
    exprs = nl.parse_list(rule.get(nl.RULE_EXPRESSIONS, b""))
    for _, e in reversed(exprs):
        a = nl.parse_attrs(e)
        if nl.attr_str(a.get(nl.EXPR_NAME, b"")) != "immediate":
            continue
        data = nl.parse_attrs(a.get(nl.EXPR_DATA, b""))
        verdict = nl.parse_attrs(nl.parse_attrs(data.get(2, b"")).get(nl.DATA_VERDICT, b""))
        chain = verdict.get(nl.VERDICT_CHAIN)
        return nl.attr_str(chain) if chain else None
    return None


def _handle(rule: dict[int, bytes]) -> int:
    return int.from_bytes(rule[nl.RULE_HANDLE], "big")


# Service ports per transaction when a full sync creates their chains (initial load); see full_sync
CHUNK = 1000
RESYNC_CHUNK = 0  # Service ports per chunk in a resync (0: one transaction); see full_sync


class IptablesNftProxier:
    """kube-proxy's iptables layout written as iptables-nft rules over nf_tables netlink."""

    name = "iptables"
    backend = "nft-netlink"

    def __init__(self, node: NodeConfig, chunk: int = CHUNK, resync_chunk: int = RESYNC_CHUNK,
                 counters: bool = False) -> None:
        self.node = node
        self.counters = counters  # per-rule `counter` expressions (nftrules.use_counters: off by default)
        self.names = Names(node.prefix)
        self.plans: dict[ServicePortName, PortRules] = {}
        self._inputs: dict[ServicePortName, tuple] = {}  # spn -> ((port, endpoints, large), plan)
        self._ep_counts: dict[ServicePortName, int] = {}  # endpoints per port, for large-cluster mode
        self._ep_total = 0
        self._known_chains: set[str] | None = None  # our nat chains after a full sync, from memory
        # (table, dispatch chain) -> rule spec -> kernel handles, for deleting one Service's dispatch rules
        self.handles: dict[tuple[str, str], dict[str, list[int]]] = {}
        self._sock: nl.NftSocket | None = None
        self.chunk = chunk
        self.resync_chunk = resync_chunk  # 0: resyncs rewrite existing chains in the last transaction
        self._order: dict[tuple[str, str], list[str]] = {}  # the last full sync's dispatch rules, in order
        self._echo: dict[int, tuple[str, str]] = {}  # the last full sync's echoed dispatch rules
        self.handle_reads = 0
        self.timing: dict[str, float] = {}  # the last full sync's phases, seconds (benchmarks print them)
        # the last one-Service change: wall and this thread's CPU seconds (user + the kernel's work in
        # sendmsg), the second independent of how busy the machine is
        self.partial_timing: tuple[float, float] = (0.0, 0.0)

    def _socket(self) -> nl.NftSocket:
        if self._sock is None:
            self._sock = nl.NftSocket()
        return self._sock

    # -- planning (shared with the legacy writer: plan.py) ----------------------------------------------
    @staticmethod
    def _large(state: ProxyState) -> bool:
        return large_cluster(sum(len(state.endpoints.get(spn, ())) for spn in state.services))

    def _plan(self, spn: ServicePortName, sp, state: ProxyState, large: bool) -> PortRules:
        key = (sp, state.endpoints.get(spn, ()), large)
        cached = self._inputs.get(spn)
        if cached is not None and cached[0] == key:
            return cached[1]
        plan = plan_port(sp, key[1], self.node, large)
        self._inputs[spn] = (key, plan)
        return plan

    def plan_all(self, state: ProxyState) -> dict[ServicePortName, PortRules]:
        large = self._large(state)
        return {spn: plan_port(sp, state.endpoints.get(spn, ()), self.node, large)
                for spn, sp in state.services.items()}

    def _dispatch_chains(self) -> list[tuple[str, str]]:
        n = self.names
        return [(NAT, n.services), (NAT, n.nodeports), (FILTER, n.services), (FILTER, n.external_services)]

    # -- syncing -----------------------------------------------------------------------------------------
    def sync(self, state: ProxyState, changes: Changes, full: bool) -> SyncResult:
        if full or self._known_chains is None:
            w0, c0 = time.perf_counter(), time.thread_time()
            self._ep_counts = {spn: len(state.endpoints.get(spn, ())) for spn in state.services}
            self._ep_total = sum(self._ep_counts.values())
            large = large_cluster(self._ep_total)
            planned = 0.0

            def plans() -> Iterable[tuple[ServicePortName, PortRules]]:
                # planned as the chunks are encoded, while the writer commits the previous ones
                nonlocal planned
                for spn, sp in state.services.items():
                    t = time.perf_counter()
                    p = self._plan(spn, sp, state, large)
                    planned += time.perf_counter() - t
                    yield spn, p

            # no cyclic GC while ~100k short-lived objects come and go (measured: ~0.4 s CPU at 10k
            # Services); the plans we keep hold no cycles
            gc_on = gc.isenabled()
            gc.disable()
            try:
                # fewer than two chunks' worth of ports: one transaction (a lone chunk overlaps nothing
                # and costs a transaction and a validation walk more: 0.48 s against 0.31 s at 1k)
                one = len(state.services) < 2 * self.chunk
                result = self.full_sync(plans(), chunk=10**9 if one else None)
            finally:
                if gc_on:
                    gc.enable()
            self._inputs = {spn: v for spn, v in self._inputs.items() if spn in self.plans}
            # cpu: this thread's and the writer thread's CPU seconds for the whole sync (the kernel's
            # work in sendmsg included), which a busy machine does not inflate the way it does wall time
            self.timing = {"plan": planned, **self.timing, "wall": time.perf_counter() - w0,
                           "cpu": time.thread_time() - c0 + self.timing.get("kernel_cpu", 0.0)}
            return result
        # nothing here is O(Services): the endpoint total is kept per changed port, only the
        # changed ports are planned, and self.plans is updated in place after the commit
        for spn in changes.ports:
            count = len(state.endpoints.get(spn, ())) if spn in state.services else 0
            self._ep_total += count - self._ep_counts.pop(spn, 0)
            if spn in state.services:
                self._ep_counts[spn] = count
        large = large_cluster(self._ep_total)
        new: dict[ServicePortName, PortRules] = {}
        for spn in changes.ports:
            sp = state.services.get(spn)
            if sp is None:
                self._inputs.pop(spn, None)
            else:
                new[spn] = self._plan(spn, sp, state, large)
        n = self.apply_partial(new, changes.ports)
        return SyncResult(full=False, rules=n, detail=f"{len(changes.ports)} ports")

    def _builtin_state(self, sock: nl.NftSocket) -> tuple[set[tuple[str, str]], set[tuple[str, str, str]]]:
        """Which builtin chains exist, and which of our hook jumps they hold (by target chain)."""
        exists: set[tuple[str, str]] = set()
        present: set[tuple[str, str, str]] = set()
        for table, chain in dict.fromkeys((t, c) for t, c, _ in jump_rules(self.node)):
            if sock.get_chain(table, chain) is None:
                continue
            exists.add((table, chain))
            rules = sock.dump(nl.GETRULE, table=table, chain=chain) or []
            targets = {_jump_target(r) for r in rules}
            for t, c, spec in jump_rules(self.node):
                if (t, c) == (table, chain) and spec.rsplit("-j ", 1)[1] in targets:
                    present.add((t, c, spec))
        return exists, present

    def _our_chains(self, sock: nl.NftSocket, table: str) -> set[str]:
        return {nl.attr_str(c[nl.CHAIN_NAME]) for c in sock.dump(nl.GETCHAIN, table=table) or ()
                if self.names.owns(nl.attr_str(c[nl.CHAIN_NAME]))}

    def full_sync(self,
                  plans: Mapping[ServicePortName, PortRules] | Iterable[tuple[ServicePortName, PortRules]],
                  chunk: int | None = None) -> SyncResult:
        """Rewrite every chain we own (drift repair; also the first sync). `plans`: a mapping, or
        (port, plan) pairs that may be planned lazily, consumed while earlier chunks commit.

        Chains absent from the kernel are created and filled in chunks of `chunk` ports (default
        self.chunk), each its own transaction, committed by a writer thread while this one plans
        and encodes the next: nothing reaches them yet, so traffic does not see them and the
        kernel's validation walk from the base chains stays where it was. One last transaction
        then creates/flushes and fills everything else (chains that existed, the dispatch and
        fixed chains, the hooks) and deletes stale chains: traffic sees the old ruleset or the
        whole new one. Fewer than `chunk` new ports: one transaction, as before. A failure leaves
        at most unreferenced chains, which the next full sync (reading the kernel again) refills
        or deletes."""
        t0, c0 = time.perf_counter(), time.thread_time()
        use_counters(self.counters)
        chunk = chunk or self.chunk
        sock = self._socket()
        exists, present = self._builtin_state(sock)
        existing = self._known_chains if self._known_chains is not None else self._our_chains(sock, NAT)
        t_state = time.perf_counter()
        base = base_rules(self.node)
        fixed = fixed_chains(self.node)
        fixed_nat = set(fixed[NAT])
        items = plans.items() if isinstance(plans, Mapping) else plans
        done: dict[ServicePortName, PortRules] = {}
        preloaded: set[str] = set()  # chains created and filled by the chunks
        writer = Writer(sock)
        pending: list[tuple[PortRules, bool]] = []  # (plan, whole: its existing chains rewritten too)
        old = self.plans if self.resync_chunk and self.plans else {}
        chunk = self.resync_chunk if old else chunk
        counts = {"chains": 0, "rules": 0}
        chunks = 0
        # the dispatch rules' bodies, per chain in plan order (the last transaction appends them)
        prebuilt: dict[tuple[str, str], list[bytes]] = {k: [] for k in self._dispatch_chains()}

        def send_chunk() -> None:
            nonlocal chunks
            b = nl.Batch(NAT)
            if not chunks:  # the table and the chains our rules jump to, before any of them
                b.add_table()
                for c in fixed[NAT]:
                    b.add_chain(c)
            append = b.append_rules
            for p, whole in pending:
                mine = [c for c in p.chains if c not in fixed_nat and (whole or c not in existing)]
                for c in mine:
                    if c in existing:
                        b.flush_chain(c)
                    else:
                        b.add_chain(c)
                for c in mine:
                    append(c, p.chains[c], body)
                preloaded.update(mine)
            pending.clear()
            counts["chains"] += b.counts["chains"] - (0 if chunks else len(fixed[NAT]))
            counts["rules"] += b.counts["rules"]
            chunks += 1
            writer.put(b)

        try:
            for spn, p in items:
                done[spn] = p
                for key, specs in p.dispatch.items():  # encoded now, while earlier chunks commit
                    prebuilt[key].extend(map(body, specs))
                # a port whose dispatch rules stay as the kernel has them (the last sync's) has its
                # chains rewritten whole in a chunk: traffic sees all of its old or all of its new rules
                q = old.get(spn)
                whole = q is not None and q.dispatch == p.dispatch and bool(p.chains)
                if whole or any(c not in existing for c in p.chains):
                    pending.append((p, whole))
                    if len(pending) >= chunk:
                        send_chunk()
            pending.clear()  # fewer than a chunk's worth left: they go in the last transaction
            t_chunks = time.perf_counter()
            b = self._final_batch(done, preloaded, existing, exists, present, base, fixed, prebuilt)
            t1 = time.perf_counter()
            writer.put(b)
            t_gc = time.perf_counter()
            if not gc.isenabled():
                # sync() paused the cyclic GC: the objects made since then (the plans, ~100k containers
                # at 10k Services) would cost the first collection after it ~90 ms, on the sync's path
                # (measured); collect the young generations now, while the kernel commits on the writer
                # thread (~150 ms here; a full collection measured 200-400 ms and is left to Python)
                gc.collect(1)
            t_gc = time.perf_counter() - t_gc
            writer.close()
        except BaseException:
            writer.close(raise_error=False)
            self._known_chains = None  # the next full sync reads the kernel's chains again
            raise
        t2 = time.perf_counter()
        self.plans = done
        self._known_chains = {c for p in done.values() for c in p.chains}
        self._record_handles(sock, self._order, writer.echoed)
        t3 = time.perf_counter()
        self.timing = {"read": t_state - t0, "chunks": float(chunks), "encode_chunks": t_chunks - t_state,
                       "encode_last": t1 - t_chunks, "gc": t_gc, "wait": t2 - t1, "kernel_cpu": writer.cpu,
                       "handles": t3 - t2, "own_cpu": time.thread_time() - c0}
        return SyncResult(full=True, rules=counts["rules"] + b.counts["rules"],
                          chains=counts["chains"] + b.counts["chains"])

    def _final_batch(self, plans: dict[ServicePortName, PortRules], preloaded: set[str], existing: set[str],
                     exists: set[tuple[str, str]], present: set[tuple[str, str, str]],
                     base: dict[tuple[str, str], list[str]], fixed: dict[str, list[str]],
                     prebuilt: dict[tuple[str, str], list[bytes]] | None = None) -> nl.Batch:
        """The full sync's last transaction: every chain of ours not preloaded by a chunk, the
        dispatch rules (their order kept in self._order for the handle read), hooks, stale chains."""
        n = self.names
        b = nl.Batch(NAT)
        order: dict[tuple[str, str], list[str]] = {k: [] for k in self._dispatch_chains()}
        prebuilt = prebuilt or {}
        echo: dict[int, tuple[str, str]] = {}  # message index -> its dispatch chain (first/last of a run)
        self._echo = echo
        wanted: set[str] = set()

        def chain(name: str) -> None:
            if name in fixed[b.table]:  # few: created if missing, emptied
                b.add_chain(name)
                b.flush_chain(name)
            elif name in existing:  # a nat chain known to exist (a failed sync forgets what it knew)
                b.flush_chain(name)
            else:  # created by this batch, so empty
                b.add_chain(name)

        def rule(chain_name: str, spec: str) -> None:
            exprs, compat = encode(spec)
            b.add_rule(chain_name, exprs, compat)

        def dispatch(key: tuple[str, str], plans: dict[ServicePortName, PortRules]) -> None:
            # one contiguous run of rule messages per dispatch chain, its first and last echoed: the
            # kernel numbers a table's new rules in message order, so the run's handles are
            # first..last when last - first + 1 == len(run) (checked in _record_handles)
            specs = order[key]
            for p in plans.values():
                specs.extend(p.dispatch.get(key, ()))
            bodies = prebuilt.get(key)
            if bodies is None or len(bodies) != len(specs):
                bodies = [body(spec) for spec in specs]
            ends = [0, len(specs) - 1] if len(specs) > 1 else [0] if specs else []
            for i in ends:
                if i:
                    b.append_rules(key[1], bodies[1:-1], bytes)
                echo[b.add_rule_body(key[1], bodies[i], echo=True)] = key

        for table in (NAT, FILTER):
            b.use(table)
            b.add_table()
            for t, c in dict.fromkeys((t, c) for t, c, _ in jump_rules(self.node)):
                if t == table and (t, c) not in exists:
                    hook, prio, kind = BUILTIN[t][c]
                    b.add_chain(c, hook, prio, kind)
            for c in fixed[table]:
                chain(c)
            if table == NAT:  # every chain before any rule: a jump needs its target to exist
                for p in plans.values():
                    for c in p.chains:
                        wanted.add(c)
                        if c not in preloaded:
                            chain(c)
            for t, c, spec in jump_rules(self.node):  # each inserted first, as `-I chain 1` in order
                if t == table and (t, c, spec) not in present:
                    exprs, compat = encode(spec)
                    b.add_rule(c, exprs, compat, prepend=True)
            for (t, c), specs in base.items():
                if t == table and not c.endswith("#tail"):
                    for spec in specs:
                        rule(c, spec)
            if table == NAT:
                append = b.append_rules  # the hot loop: ~11 rules per Service port
                for p in plans.values():
                    for c, specs in p.chains.items():
                        if c not in preloaded:
                            append(c, specs, body)
            for key in order:
                if key[0] == table:
                    dispatch(key, plans)
            if table == NAT:
                for spec in base[(NAT, n.services + "#tail")]:
                    rule(n.services, spec)
                stale = sorted(c for c in existing if c not in wanted and c not in fixed[NAT])
                for c in stale:
                    b.flush_chain(c)
                for c in stale:
                    b.del_chain(c)
        self._order = order
        return b

    def _record_handles(self, sock: nl.NftSocket, order: dict[tuple[str, str], list[str]],
                        echoed: Sequence[tuple[int, int, dict[int, bytes]]] = ()) -> None:
        """The dispatch rules' handles: from the first and last rule of each chain's run, which the
        kernel echoed (handles are allocated one per new rule of a table, in message order, so a run
        of n rules spanning exactly n handles holds them all in order); a chain whose span does not
        match is read back by a dump of its handles (we flushed and appended each chain in order)."""
        ends: dict[tuple[str, str], list[int]] = {}
        for idx, mtype, attrs in echoed:
            key = self._echo.get(idx)
            if key is not None and mtype == nl.NEWRULE and nl.RULE_HANDLE in attrs:
                ends.setdefault(key, []).append(_handle(attrs))
        self.handles = {}
        self.handle_reads = 0  # chains whose handles had to be dumped (tests, benchmarks)
        for (table, c), specs in order.items():
            got = ends.get((table, c), [])
            if specs and len(got) in (1, 2) and max(got) - min(got) + 1 == len(specs):
                handles: Iterable[int] = range(min(got), max(got) + 1)
            else:
                handles = sock.rule_handles(table, c) if specs else ()
                self.handle_reads += 1 if specs else 0
            by_spec: dict[str, list[int]] = {}
            for spec, h in zip(specs, handles, strict=False):
                by_spec.setdefault(spec, []).append(h)
            self.handles[(table, c)] = by_spec

    def apply_partial(self, new: dict[ServicePortName, PortRules], changed) -> int:
        """One transaction for the changed ports (partial_ops: the same steps as a partial restore).

        `new`: the changed ports' new plans (a port missing from it is gone); other entries are ignored."""
        w0, c0 = time.perf_counter(), time.thread_time()
        use_counters(self.counters)
        changed = list(changed)
        ops = partial_ops(self.plans, new, changed)
        if not ops:
            self._adopt(new, changed)
            return 0
        b = nl.Batch(NAT)
        echo: dict[int, tuple[str, str, str]] = {}
        dispatch = set(self._dispatch_chains())
        removed: list[tuple[str, str, str, int]] = []
        count = 0
        for table, table_ops in ops.items():
            b.use(table)
            for op in table_ops:
                verb, c = op[0], op[1]
                if verb == "declare":
                    b.add_chain(c)
                    b.flush_chain(c)
                elif verb == "-X":
                    b.flush_chain(c)
                    b.del_chain(c)
                elif verb == "-D":
                    handles = self.handles.get((table, c), {}).get(op[2])
                    if not handles:
                        raise nl.NftError(2, f"no handle known for a {table} {c} rule: {op[2]!r}")
                    b.del_rule(c, handles[-1])
                    removed.append((table, c, op[2], handles[-1]))
                else:
                    exprs, compat = encode(op[2])
                    want = (table, c) in dispatch
                    i = b.add_rule(c, exprs, compat, prepend=verb == "-I", echo=want)
                    if want:
                        echo[i] = (table, c, op[2])
                    count += 1
        echoed = self._socket().send(b)
        for table, c, spec, h in removed:
            hs = self.handles[(table, c)][spec]
            hs.remove(h)
            if not hs:
                del self.handles[(table, c)][spec]
        for idx, mtype, attrs in echoed:
            if mtype == nl.NEWRULE and idx in echo and nl.RULE_HANDLE in attrs:
                table, c, spec = echo[idx]
                self.handles.setdefault((table, c), {}).setdefault(spec, []).append(_handle(attrs))
        self._adopt(new, changed)
        if self._known_chains is not None:
            for spn in changed:
                if spn in new:
                    self._known_chains.update(new[spn].chains)
            for verb, *rest in ops.get(NAT, ()):
                if verb == "-X":
                    self._known_chains.discard(rest[0])
        self.partial_timing = (time.perf_counter() - w0, time.thread_time() - c0)
        return count

    def _adopt(self, new: dict[ServicePortName, PortRules], changed: list[ServicePortName]) -> None:
        for spn in changed:
            if spn in new:
                self.plans[spn] = new[spn]
            else:
                self.plans.pop(spn, None)

    def cleanup(self) -> None:
        """Remove every chain and hook we own (kube-proxy --cleanup)."""
        sock = self._socket()
        b = nl.Batch(NAT)
        for table in (FILTER, NAT):
            b.use(table)
            ours_fixed = set(fixed_chains(self.node)[table])
            for c in dict.fromkeys(c for t, c, _ in jump_rules(self.node) if t == table):
                for r in sock.dump(nl.GETRULE, table=table, chain=c) or ():
                    target = _jump_target(r)
                    if target in ours_fixed:
                        b.del_rule(c, _handle(r))
            ours = self._our_chains(sock, table)
            for c in sorted(ours):
                b.flush_chain(c)
            for c in sorted(ours):
                b.del_chain(c)
        sock.send(b)
        self.plans = {}
        self.handles = {}
        self._known_chains = None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

#!/usr/bin/env python3
"""What a one-Service change costs the kernel in the iptables mode (nf_tables commit validation).

A transaction adding a rule with an expression that has a ->validate op (immediate verdicts, xt
compat matches and targets) makes the commit walk every chain reachable from the table's base
chains. Two parts, each in a fresh network namespace, CPU of the committing thread (the kernel's
work in sendmsg; independent of how busy the machine is, unlike the wall time also printed):

- synthetic: a nat table whose base chains jump to one chain of N rules of a given shape (each
  jumping to one shared chain, or with --distinct to a chain of its own): what a walk costs per
  rule, per expression kind and per base hook.
- real: the iptables mode's own ruleset for N Services x 3 endpoints (netproxy's full sync), then a
  one-rule commit with and without validation, with 2, 1 and 0 base hooks jumping to KUBE-SERVICES,
  and the bench's one-Service change (one endpoint replaced) end to end.

Run as root: .venv/bin/python bench/ipt_validate.py --real 10000 --synthetic 100000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.netproxy_common import commit_one_rule, ep, netns, objects
from bench.report import add_plot_argument, plot_bars
from kernel import nftables as nl
from kernel.netns import NetnsWorker
from netproxy.iptables import nftrules as R
from netproxy.iptables.nftproxier import _handle, _jump_target

HOOKS = {"PREROUTING": (0, -100), "OUTPUT": (3, -100)}
_NAT5 = (
    R._META_L4
    + R._cmp(nl.CMP_EQ, b"\x06")
    + R._DADDR4
    + R._cmp(nl.CMP_EQ, bytes((10, 96, 0, 1)))
    + R._dport(80)
)
SHAPES = {  # rule expressions before the jump (none: the rule has no verdict)
    "jump": lambda: b"",
    "counter,jump": lambda: nl.COUNTER,
    "3 counters,jump": lambda: nl.COUNTER * 3,
    "6 native,counter,jump": lambda: _NAT5 + nl.COUNTER,
    "xt comment,counter,jump": lambda: R._comment("ns1/svc1:http cluster IP") + nl.COUNTER,
    "xt statistic,counter,jump": lambda: R._statistic(0.333) + nl.COUNTER,
    "counter (no verdict)": lambda: nl.COUNTER,
}


def _medians(worker: NetnsWorker, rounds: int = 7) -> tuple[float, float, float]:
    """Validating commit CPU, its wall, non-validating commit CPU (ms), alternated."""
    val, nov = [], []
    for _ in range(rounds):
        val.append(worker.call(commit_one_rule, True))
        nov.append(worker.call(commit_one_rule, False))
    return (
        statistics.median(c for _, c in val) * 1e3,
        statistics.median(w for w, _ in val) * 1e3,
        statistics.median(c for _, c in nov) * 1e3,
    )


def _load_synthetic(n: int, shape: str, hooks: list[str], distinct: bool) -> None:
    s = nl.NftSocket()
    try:
        b = nl.Batch("nat")
        b.add_table()
        b.del_table()
        s.send(b)
        b = nl.Batch("nat")
        b.add_table()
        for h in hooks:
            b.add_chain(h, HOOKS[h][0], HOOKS[h][1], "nat")
        b.add_chain("TOP")
        b.add_chain("LEAF")
        b.add_rule("LEAF", nl.COUNTER + nl.immediate_verdict(nl.RETURN))
        leaves = [f"L{i}" for i in range(n)] if distinct else ["LEAF"] * n
        for c in dict.fromkeys(leaves):
            if c != "LEAF":
                b.add_chain(c)
                b.add_rule(c, nl.COUNTER + nl.immediate_verdict(nl.RETURN))
        head = SHAPES[shape]()
        verdict = "no verdict" not in shape
        for c in leaves:
            b.add_rule("TOP", head + (R._jump(c) if verdict else b""))
        for h in hooks:
            b.add_rule(h, nl.COUNTER + R._jump("TOP"))
        s.send(b)
    finally:
        s.close()


Bars = dict[str, dict[str, float]]  # case -> {"validating": ms CPU, "not validating": ms CPU}


def synthetic(n: int, distinct: bool, bars: Bars) -> None:
    ns = f"iptval{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    worker = NetnsWorker(ns)
    try:
        cases = [(shape, ["PREROUTING", "OUTPUT"]) for shape in SHAPES]
        cases += [("counter,jump", ["PREROUTING"]), ("counter,jump", [])]
        for shape, hooks in cases:
            worker.call(_load_synthetic, n, shape, hooks, distinct)
            worker.call(commit_one_rule, True)
            v, vw, nv = _medians(worker)
            per = (v - nv) * 1e6 / (n * max(1, len(hooks)))
            bars[f"{shape} ({','.join(hooks) or 'no hook'})"] = {"validating": v, "not validating": nv}
            print(
                f"synthetic {n} rules {'(own chains)' if distinct else '':12} {shape:26} hooks "
                f"{','.join(hooks) or '-':19} commit CPU {v:6.1f} ms (wall {vw:6.1f}), without validation "
                f"{nv:4.1f} ms: {per:4.0f} ns a rule a hook  [load {os.getloadavg()[0]:.1f}]",
                flush=True,
            )
    finally:
        worker.close()
        subprocess.run(["ip", "netns", "del", ns], check=False)


def _hook_jump(chain: str) -> None:
    """Delete `chain`'s jump to KUBE-SERVICES."""
    s = nl.NftSocket()
    try:
        b = nl.Batch("nat")
        for r in s.dump(nl.GETRULE, table="nat", chain=chain) or ():
            if _jump_target(r) == "KUBE-SERVICES":
                b.del_rule(chain, _handle(r))
        s.send(b)
    finally:
        s.close()


async def real(n: int, changes: int, counters: bool, bars: Bars) -> None:
    from netproxy.iptables.nftproxier import IptablesNftProxier
    from netproxy.proxier import NodeConfig
    from netproxy.proxy import Proxy
    from nodeagent.testing.netproxy_lab import endpoint_slice

    ns = netns()
    worker = NetnsWorker(ns)
    node = NodeConfig(node_name="bench", cluster_cidr="10.100.0.0/14")
    proxier = IptablesNftProxier(node, counters=counters)
    proxy = Proxy(proxier, worker, clear_conntrack=False)
    try:
        objs = list(objects(n, 3))
        for s, _ in objs:
            proxy.on_service(None, s)
        for _, sl in objs:
            proxy.on_endpoint_slice(sl)
        proxy.set_services_synced()
        proxy.set_endpoints_synced()
        await proxy.sync()
        tag = f"real {n} Services x 3 (counters {'on' if counters else 'off'})"
        v, vw, nv = _medians(worker)
        walls, cpus = [], []
        port = [{"name": "http", "port": 8080, "protocol": "TCP"}]
        for c in range(changes):
            i = (c * 7919) % n
            s, _ = objs[i]
            eps = [{"ip": ep(i, k)} for k in range(2)] + [{"ip": f"10.99.{c // 250}.{c % 250 + 1}"}]
            sl = endpoint_slice(f"svc{i}", port, eps, namespace=s["metadata"]["namespace"])
            proxy.on_endpoint_slice(sl)
            t0 = time.perf_counter()
            await proxy.sync()
            walls.append(time.perf_counter() - t0)
            cpus.append(proxier.partial_timing[1])
        print(
            f"{tag}: one-rule commit CPU {v:.1f} ms (wall {vw:.1f}), without validation {nv:.1f} ms; "
            f"one-Service change p50 CPU {statistics.median(cpus) * 1e3:.1f} ms, wall p50 "
            f"{statistics.median(walls) * 1e3:.1f} max {max(walls) * 1e3:.1f} ms  "
            f"[load {os.getloadavg()[0]:.1f}]",
            flush=True,
        )
        bars[f"real {n} Services, counters {'on' if counters else 'off'} #{len(bars) + 1}"] = {
            "validating": v, "not validating": nv}
        by_hooks = [v]
        for chain in ("OUTPUT", "PREROUTING"):  # the walks from each hook reaching KUBE-SERVICES
            worker.call(_hook_jump, chain)
            by_hooks.append(_medians(worker)[0])
        print(
            f"{tag}: one-rule commit CPU with 2 / 1 / 0 base hooks jumping to KUBE-SERVICES: "
            + " / ".join(f"{x:.1f}" for x in by_hooks)
            + " ms",
            flush=True,
        )
    finally:
        worker.close()
        await asyncio.to_thread(subprocess.run, ["ip", "netns", "del", ns], check=False)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--synthetic", type=int, default=0, help="rules in the synthetic chain (0: skip)")
    p.add_argument("--distinct", action="store_true", help="synthetic: each rule jumps to a chain of its own")
    p.add_argument("--real", type=int, default=0, help="Services in the real ruleset (0: skip)")
    p.add_argument("--changes", type=int, default=15)
    p.add_argument("--counters", choices=("off", "on", "both"), default="both")
    add_plot_argument(p)
    args = p.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces, netfilter)", file=sys.stderr)
        return 1
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus (shared machine)")
    bars: Bars = {}
    if args.synthetic:
        synthetic(args.synthetic, args.distinct, bars)
    if args.real:
        for on in {"off": [False], "on": [True], "both": [False, True, False, True]}[args.counters]:
            asyncio.run(real(args.real, args.changes, on, bars))
    if args.plot:
        plot_bars(args.plot, bars, "one-rule nf_tables commit: kernel CPU with and without validation",
                  "ms CPU")
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""netproxy sync cost per mode: full sync, periodic resync and one-Service change, beside the raw floors.

For each size (Services × endpoints) and mode, a fresh network namespace gets the
rules through the real path (trackers → Proxy.sync → backend); nothing touches
the host's own namespace. Floors measured in the same run on the same ruleset:
one `iptables-legacy-restore` of the text our full sync generated (full floor),
one kube-proxy-style `iptables-legacy-restore --noflush` of one Service's changed
chains into that loaded table (partial floor), the kernel's own floor for any
legacy change (GET_ENTRIES + SET_REPLACE of the unchanged nat table, counters
restored: kernel/xtables.py), python-iptables loading the whole ruleset
(up to --pyiptc-full-max Services; ~0.6 ms a rule), and one `nft -f` of our
nftables table as `nft list` prints it (slow above ~5k: capped by
--nft-floor-max). Each mode's line names the mechanism of each job. One-Service
changes are timed per case, end to end through Proxy.sync: a new Service with its
endpoints (add), one endpoint of an existing Service replaced (eps: the main
table's change column), a Service deleted (del); beside them, the raw floor of one
`nft -f` adding a single set element to the same table in the same netns
(nftables, every size) and the partial-restore floor (iptables). Run as root:

    .venv/bin/python bench/netproxy_sync.py --sizes 1000,5000,10000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.netproxy_common import commit_one_rule, ep, netns, objects
from bench.report import add_plot_argument, pct, plot_lines
from kernel.netns import NetnsWorker
from netproxy.backends import make_proxier
from netproxy.iptables.nftproxier import IptablesNftProxier
from netproxy.iptables.proxier import IptablesProxier
from netproxy.proxier import NodeConfig
from netproxy.proxy import Proxy
from nodeagent.testing.netproxy_lab import endpoint_slice, service

MODES = {
    "iptables": ("iptables", {"backend": "nft"}),  # the default on nf_tables kernels
    "iptables-1txn": ("iptables", {"backend": "nft", "chunk": str(10**9)}),  # full load in one transaction
    "iptables-legacy": ("iptables", {"backend": "legacy", "incremental": "libiptc"}),
    "iptables-xtblob": ("iptables", {"backend": "legacy", "incremental": "xtblob"}),
    "iptables-restore": ("iptables", {"backend": "legacy", "incremental": "restore"}),
    "iptables-nft-restore": ("iptables", {"backend": "nft-restore"}),
    "nftables": ("nftables", {}),
}


def count_rules(mode: str, ns: str) -> int:
    if mode.startswith("iptables"):
        nft = mode in ("iptables", "iptables-1txn", "iptables-nft-restore")
        cmd = "iptables-nft-save" if nft else "iptables-legacy-save"
        out = subprocess.run(["ip", "netns", "exec", ns, cmd], capture_output=True, text=True).stdout
        return sum(1 for ln in out.splitlines() if ln.startswith("-A "))
    return -1


MECHANISM = {  # (full sync, one-Service change)
    "iptables": ("iptables-nft rules, chunked nf_tables batches + 1",
                 "nf_tables netlink batch (changed chains, handles)"),
    "iptables-1txn": ("iptables-nft rules, 1 nf_tables netlink batch",
                      "nf_tables netlink batch (changed chains, handles)"),
    "iptables-legacy": ("iptables-legacy-restore (streamed)", "python-iptables/libiptc"),
    "iptables-xtblob": ("iptables-legacy-restore (streamed)", "x_tables blob edit (xtblob: 1 SET_REPLACE)"),
    "iptables-restore": ("iptables-legacy-restore (streamed)", "iptables-legacy-restore --noflush partial"),
    "iptables-nft-restore": ("iptables-nft-restore", "iptables-nft-restore --noflush partial"),
    "nftables": ("nf_tables netlink batch", "nf_tables netlink batch"),
}


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def floor_restore(text: str) -> tuple[float, float]:
    """One iptables-legacy-restore of `text` into a fresh netns: wall seconds, and the CPU seconds
    (user + system, the kernel's table translation included) of the processes it ran."""
    ns = netns()
    try:
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy-restore", "-w", "--noflush"], input=text,
                       text=True, check=True)
        wall = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def floors_iptables(plans: dict, node: NodeConfig, spn, sp, eps, large: bool, rounds: int,
                    pyiptc_max: int) -> dict:
    """Legacy floors on `plans`' ruleset in a fresh netns: full restore, one Service's partial
    restore, the kernel's unchanged-table replace, and (small sizes) python-iptables full load."""
    from kernel.xtables import replace_unchanged
    from netproxy.iptables.plan import full_restore, partial_restore, plan_port
    from netproxy.model import Endpoint

    out: dict = {}
    text = full_restore(plans, node)
    ns = netns()
    worker = NetnsWorker(ns)
    try:
        t0 = time.perf_counter()
        subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy-restore", "-w", "--noflush"], input=text,
                       text=True, check=True)
        out["floor"] = time.perf_counter() - t0
        cur = {spn: plans[spn]}
        times = []
        for r in range(rounds):  # one Service's endpoint replaced, as the bench's own changes do
            moved = list(eps[:-1]) + [Endpoint(f"10.98.{r // 250}.{r % 250 + 1}", eps[-1].port)]
            new = {spn: plan_port(sp, moved, node, large)}
            part = partial_restore(cur, new, [spn])
            t0 = time.perf_counter()
            subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy-restore", "-w", "--noflush"],
                           input=part, text=True, check=True)
            times.append(time.perf_counter() - t0)
            cur = new
        out["floor_partial"] = _median(times)
        kernel = [worker.call(replace_unchanged, "nat") for _ in range(rounds)]
        out["kernel_replace"] = _median([k.replace for k in kernel])
        out["kernel_get"] = _median([k.get for k in kernel])
        out["kernel_entries"], out["kernel_mb"] = kernel[0].entries, kernel[0].size / 1e6
    finally:
        worker.close()
        subprocess.run(["ip", "netns", "del", ns], check=False)
    if len(plans) <= pyiptc_max:
        out["pyiptc_full"] = floor_pyiptc_full(plans, node)
    return out


def floor_pyiptc_full(plans: dict, node: NodeConfig) -> float:
    """python-iptables (libiptc) loading every Service's rules in one commit per table."""
    from netproxy.iptables.libiptc import apply_partial
    from netproxy.iptables.plan import full_restore

    ns = netns()
    worker = NetnsWorker(ns)
    try:  # the fixed chains first (their rules are a handful): per-port chains jump to them
        subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy-restore", "-w", "--noflush"],
                       input=full_restore({}, node), text=True, check=True)
        t0 = time.perf_counter()
        worker.call(apply_partial, {}, plans, list(plans), node)
        return time.perf_counter() - t0
    finally:
        worker.close()
        subprocess.run(["ip", "netns", "del", ns], check=False)


def floors_iptables_nft(ns: str, worker: NetnsWorker, proxier, spn, sp, eps, large: bool,
                        rounds: int) -> dict:
    """nf_tables floors in the table our iptables-nft writer built (it is iptables-nft's own layout, so
    iptables-nft-restore can edit it): one Service's partial `iptables-nft-restore --noflush` (the
    one-Service figure of the issue's floors, without its 56 s full load), and the kernel's own cost
    of any nat transaction adding a rule (nf_tables re-validates every chain reachable from the base
    chains on commit: O(table), whoever the writer is)."""
    from netproxy.iptables.plan import partial_restore, plan_port
    from netproxy.model import Endpoint

    node = proxier.node
    cur = {spn: proxier.plans[spn]}
    times = []
    for r in range(rounds):
        moved = list(eps[:-1]) + [Endpoint(f"10.98.{r // 250}.{r % 250 + 1}", eps[-1].port)]
        new = {spn: plan_port(sp, moved, node, large)}
        text = partial_restore(cur, new, [spn])
        t0 = time.perf_counter()
        subprocess.run(["ip", "netns", "exec", ns, "iptables-nft-restore", "-w", "--noflush"], input=text,
                       text=True, check=True)
        times.append(time.perf_counter() - t0)
        cur = new

    kernel = [worker.call(commit_one_rule, True)[0] for _ in range(rounds)]
    return {"nft_partial": _median(times), "nft_kernel_txn": _median(kernel)}


def floor_nft(src_ns: str, table: str) -> float:
    """nft -f full load of our table's text in a fresh netns."""
    text = subprocess.run(["ip", "netns", "exec", src_ns, "nft", "list", "table", "ip", table],
                          capture_output=True, text=True, check=True).stdout
    ns = netns()
    try:
        t0 = time.perf_counter()
        subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=text, text=True, check=True)
        return time.perf_counter() - t0
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def floor_nft_element(ns: str, table: str, runs: int = 5) -> float:
    """Median of `nft -f` adding one set element (then deleting it) in the table our proxier wrote."""
    times = []
    for k in range(runs):
        elem = f"{{ 10.99.255.{k + 1} . tcp . 80 }}"
        t0 = time.perf_counter()
        subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], check=True, text=True,
                       input=f"add element ip {table} no-endpoint-services {elem}\n")
        times.append(time.perf_counter() - t0)
        subprocess.run(["ip", "netns", "exec", ns, "nft", "delete", "element", "ip", table,
                        "no-endpoint-services", elem], check=True)
    return pct(times, 0.5)


async def one_service_cases(proxy: Proxy, proxier, objs: list, n: int, eps: int,
                            changes: int) -> tuple[dict[str, list[float]], list[tuple[float, float, float]]]:
    """Time single-Service syncs: add (Service + its slice), eps (one endpoint replaced), del (Service
    gone). Also returns, per eps change, the legacy x_tables split (read, replace, total) where the
    proxier keeps one."""
    port, ep_port = [{"name": "http", "port": 80, "protocol": "TCP"}], [{"name": "http", "port": 8080,
                                                                         "protocol": "TCP"}]
    times: dict[str, list[float]] = {"add": [], "eps": [], "del": []}
    splits: list[tuple[float, float, float]] = []

    async def timed(case: str) -> None:
        t0 = time.perf_counter()
        await proxy.sync()
        times[case].append(time.perf_counter() - t0)

    added = []
    for c in range(changes):
        s = service(f"new{c}", f"10.98.{c // 250}.{c % 250 + 1}", port, namespace="bench-new")
        proxy.on_service(None, s)
        sl = endpoint_slice(f"new{c}", ep_port, [{"ip": f"10.97.{c}.{k + 1}"} for k in range(eps)],
                            namespace="bench-new")
        proxy.on_endpoint_slice(sl)
        await timed("add")
        added.append((s, sl))
    for c in range(changes):
        i = (c * 7919) % n
        s, sl = objs[i]
        moved = [{"ip": ep(i, k)} for k in range(eps - 1)] + [{"ip": f"10.99.{c // 250}.{c % 250 + 1}"}]
        new = endpoint_slice(f"svc{i}", ep_port, moved, namespace=s["metadata"]["namespace"])
        proxy.on_endpoint_slice(new)
        await timed("eps")
        if hasattr(proxier, "partial_timing"):
            splits.append(proxier.partial_timing)
        xt = getattr(proxier, "_xt", {}).get("nat")
        if xt is not None and xt.timing:
            splits.append((xt.timing["read"], xt.timing["replace"], times["eps"][-1]))
    for s, sl in added:  # the Service and its slice go in one sync
        proxy.on_service(s, None)
        proxy.on_endpoint_slice(sl, removed=True)
        await timed("del")
    return times, splits


async def run_mode(label: str, n: int, eps: int, changes: int, args) -> dict:
    mode, opts = MODES[label]
    ns = netns()
    worker = NetnsWorker(ns)
    node = NodeConfig(node_name="bench", cluster_cidr="10.100.0.0/14")
    proxier = make_proxier(mode, node, **opts)
    ipt = proxier if isinstance(proxier, IptablesProxier | IptablesNftProxier) else None  # iptables modes
    proxy = Proxy(proxier, worker, clear_conntrack=False)
    out: dict = {"mode": label, "services": n}
    try:
        objs = list(objects(n, eps))
        for s, _ in objs:
            proxy.on_service(None, s)
        for _, sl in objs:
            proxy.on_endpoint_slice(sl)
        proxy.set_services_synced()
        proxy.set_endpoints_synced()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = await proxy.sync()
        out["full"] = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # restore tools: their own CPU vs the kernel's
        out["child_cpu"] = (ru1.ru_utime - ru0.ru_utime, ru1.ru_stime - ru0.ru_stime)
        if ipt is not None and label != "iptables-nft-restore" and not args.no_floor:
            from netproxy.iptables.plan import full_restore

            # the floor right after our full sync, on the same ruleset (the machine's load drifts)
            out["floor_adjacent"], out["floor_cpu"] = floor_restore(full_restore(ipt.plans, node))
        out["timing"] = dict(getattr(proxier, "timing", {}) or {})
        out["load"] = os.getloadavg()[0]
        out["rules"] = r.rules if r else 0
        out["chains"] = r.chains if r else 0
        t0 = time.perf_counter()
        await proxy.sync(full=True)
        out["resync"] = time.perf_counter() - t0
        cases, splits = await one_service_cases(proxy, proxier, objs, n, eps, changes)
        out["cases"] = {k: (pct(v, 0.5), pct(v, 0.99)) for k, v in cases.items()}
        times = cases["eps"]
        out["change_p50"], out["change_p99"] = pct(times, 0.5), pct(times, 0.99)
        if splits and len(splits[0]) == 2:  # the nf_tables writer: (wall, thread CPU) of its own work
            out["cpu_split"] = [pct([x[k] for x in splits], 0.5) for k in range(2)]
        elif splits:
            out["split"] = [pct([x[k] for x in splits], 0.5) for k in range(3)]
        if ipt is not None and not args.no_floor and n not in args.floored:
            args.floored.add(n)  # once per size, on the first iptables mode's final ruleset
            i = ((changes - 1) * 7919) % n
            spn, sp = next((k, v) for k, v in proxy.state.services.items() if k.name == f"svc{i}")
            out.update(floors_iptables(ipt.plans, node, spn, sp, proxy.state.endpoints[spn],
                                       ipt._large(proxy.state), 5, args.pyiptc_full_max))
        if label == "iptables" and ipt is not None and not args.no_floor:
            i = ((changes - 1) * 7919) % n
            spn, sp = next((k, v) for k, v in proxy.state.services.items() if k.name == f"svc{i}")
            out.update(floors_iptables_nft(ns, worker, proxier, spn, sp, proxy.state.endpoints[spn],
                                           ipt._large(proxy.state), 5))
        if label == "nftables" and not args.no_floor:
            out["floor_elem"] = floor_nft_element(ns, node.nft_table)
            if n <= args.nft_floor_max:
                out["floor"] = floor_nft(ns, node.nft_table)
        counted = count_rules(label, ns)
        if counted >= 0:
            out["rules"] = counted
        await proxy.cleanup()
    finally:
        worker.close()
        await asyncio.to_thread(subprocess.run, ["ip", "netns", "del", ns], check=False)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1000,5000,10000", help="comma-separated Service counts")
    p.add_argument("--modes", default="iptables,iptables-legacy,iptables-xtblob,iptables-restore,nftables",
                   help=f"comma-separated, from {', '.join(MODES)} "
                        "(iptables-nft-restore is slow: 56 s at 10k)")
    p.add_argument("--endpoints", type=int, default=3)
    p.add_argument("--changes", type=int, default=20, help="one-Service changes measured per run")
    p.add_argument("--nft-floor-max", type=int, default=5000, help="skip the nft -f floor above this size")
    p.add_argument("--no-floor", action="store_true")
    p.add_argument("--pyiptc-full-max", type=int, default=1000,
                   help="measure python-iptables loading the whole ruleset up to this size "
                        "(slow: ~0.6 ms a rule)")
    add_plot_argument(p)
    args = p.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces, netfilter)", file=sys.stderr)
        return 1
    args.floored = set()
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus (shared machine)")
    print("floor s: one iptables-legacy-restore of the same ruleset into a fresh netns, right after the "
          "mode's full sync\n(nftables: nft -f); floor change ms: a one-Service partial "
          "iptables-legacy-restore (nftables: one nft element add)")
    print(f"{'mode':18} {'svcs':>6} {'rules':>7} {'full s':>8} {'floor s':>8} {'ratio':>6} {'resync s':>9} "
          f"{'1-svc p50 ms':>13} {'p99 ms':>8} {'floor change ms':>15}  mechanism: full / change")
    pad = f"{'':18} {'':>6}   "  # under the mode and size columns
    full_by_mode: dict[str, list[tuple[float, float]]] = {}
    for size in [int(x) for x in args.sizes.split(",")]:
        floors: dict = {}
        for label in args.modes.split(","):
            r = asyncio.run(run_mode(label, size, args.endpoints, args.changes, args))
            if label.startswith("iptables"):
                floors.update({k: v for k, v in r.items() if k.startswith(("floor", "kernel", "pyiptc"))
                               and k != "floor_adjacent"})
                floor = r.get("floor_adjacent") or floors.get("floor")
            else:
                floor = r.get("floor")
            ratio = f"{r['full'] / floor:.2f}" if floor else "-"
            fe = f"{r['floor_elem'] * 1e3:.1f}" if r.get("floor_elem") else "-"
            if label.startswith("iptables") and floors.get("floor_partial"):
                fe = f"{floors['floor_partial'] * 1e3:.1f}"
            full_m, change_m = MECHANISM[label]
            full_by_mode.setdefault(f"{label} full sync", []).append((size, r["full"]))
            if floor:
                full_by_mode.setdefault(f"{label} floor", []).append((size, floor))
            print(f"{label:18} {size:>6} {r['rules']:>7} {r['full']:>8.2f} {floor or 0:>8.2f} {ratio:>6} "
                  f"{r['resync']:>9.2f} {r['change_p50'] * 1e3:>13.1f} {r['change_p99'] * 1e3:>8.1f} "
                  f"{fe:>15}  {full_m} / {change_m}  [load {r['load']:.1f}]", flush=True)
            cases = "  ".join(f"{k} p50 {a * 1e3:.2f} / p99 {b * 1e3:.2f} ms"
                              for k, (a, b) in r["cases"].items())
            beside = ""
            if r.get("floor_elem"):
                beside = f"  | nft -f one element: {r['floor_elem'] * 1e3:.1f} ms"
            elif label.startswith("iptables") and floors.get("floor_partial"):
                beside = f"  | legacy-restore one-Service partial: {floors['floor_partial'] * 1e3:.1f} ms"
            print(f"{'':18} {size:>6}   one Service: {cases}{beside}", flush=True)
            if r.get("split"):
                rd, rp, tot = r["split"]
                print(f"{pad}change p50 split: GET_ENTRIES + compare {rd * 1e3:.0f} ms, SET_REPLACE + "
                      f"ADD_COUNTERS {rp * 1e3:.0f} ms, the rest (plan, encode, splice, proxy) "
                      f"{(tot - rd - rp) * 1e3:.0f} ms")
            if r.get("cpu_split"):
                wall, cpu = r["cpu_split"]
                print(f"{pad}eps change p50 inside the writer: {wall * 1e3:.1f} ms wall, "
                      f"{cpu * 1e3:.1f} ms CPU of its thread (Python + the kernel's commit in sendmsg)")
            if r.get("nft_partial"):
                print(f"{pad}nf_tables floors in the same table: iptables-nft-restore one-Service "
                      f"partial {r['nft_partial'] * 1e3:.1f} ms; kernel commit of any nat rule add "
                      f"{r['nft_kernel_txn'] * 1e3:.1f} ms (whole-table validation)")
            if r.get("timing"):
                ph = ", ".join(f"{k} {v:.2f} s" for k, v in r["timing"].items())
                print(f"{pad}full sync phases: {ph}; load average {r['load']:.1f}")
                if r.get("floor_cpu") and r["timing"].get("cpu"):
                    sync_cpu = r["timing"]["cpu"]
                    print(f"{pad}full sync CPU {sync_cpu:.2f} s (planning, encoding, the "
                          f"kernel's commit) vs the floor's iptables-legacy-restore CPU "
                          f"{r['floor_cpu']:.2f} s (user+sys): ratio {sync_cpu / r['floor_cpu']:.2f}")
            cu, cs = r["child_cpu"]
            if cu + cs > 0.05:
                print(f"{pad}full sync's child processes: {cu:.2f} s user, {cs:.2f} s sys (kernel)")
        if "kernel_replace" in floors:
            py = (f"{floors['pyiptc_full']:.2f} s" if "pyiptc_full" in floors
                  else f"not run (> {args.pyiptc_full_max})")
            print(f"{'  floors':18} {size:>6}  legacy-restore full {floors['floor']:.2f} s, "
                  f"one-Service partial restore {floors['floor_partial'] * 1e3:.0f} ms; kernel nat table "
                  f"({floors['kernel_entries']} entries, {floors['kernel_mb']:.0f} MB): GET_ENTRIES "
                  f"{floors['kernel_get'] * 1e3:.0f} ms + SET_REPLACE unchanged "
                  f"{floors['kernel_replace'] * 1e3:.0f} ms; python-iptables full load {py}; "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
    if args.plot:
        plot_lines(args.plot, full_by_mode, "netproxy full sync against Services (floor: one restore of "
                   "the same ruleset)", "Services", "seconds")
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

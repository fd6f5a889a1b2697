#!/usr/bin/env python3
"""netproxy sync cost per mode: full sync, periodic resync and one-Service change, beside the raw floors.

For each size (Services × endpoints) and mode, a fresh network namespace gets the
rules through the real path (trackers → Proxy.sync → backend); nothing touches
the host's own namespace. Floors measured in the same run on the same ruleset:
one `iptables-legacy-restore` of the text our full sync generated, and one
`nft -f` of our nftables table as `nft list` prints it (slow above ~5k: capped
by --nft-floor-max). One-Service changes are timed per case, end to end through
Proxy.sync: a new Service with its endpoints (add), one endpoint of an existing
Service replaced (eps), a Service deleted (del); beside them, the raw floor of
one `nft -f` adding a single set element to the same table in the same netns.
Run as root:

    .venv/bin/python bench/netproxy_sync.py --sizes 1000,5000,10000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from netproxy.backends import make_proxier
from netproxy.lab import endpoint_slice, service
from netproxy.netns import NetnsWorker
from netproxy.proxier import NodeConfig
from netproxy.proxy import Proxy

MODES = {
    "iptables": ("iptables", {"backend": "legacy", "incremental": "libiptc"}),
    "iptables-restore": ("iptables", {"backend": "legacy", "incremental": "restore"}),
    "iptables-nft": ("iptables", {"backend": "nft"}),
    "nftables": ("nftables", {}),
}


def vip(i: int) -> str:
    return f"10.96.{i // 250}.{i % 250 + 1}"


def ep(i: int, k: int) -> str:
    n = i * 3 + k
    return f"10.{100 + n // 62500}.{n // 250 % 250}.{n % 250 + 1}"


def objects(n: int, eps: int):
    ports = [{"name": "http", "port": 80, "protocol": "TCP"}]
    for i in range(n):
        yield (service(f"svc{i}", vip(i), ports, namespace=f"ns{i % 20}"),
               endpoint_slice(f"svc{i}", [{"name": "http", "port": 8080, "protocol": "TCP"}],
                              [{"ip": ep(i, k)} for k in range(eps)], namespace=f"ns{i % 20}"))


def netns() -> str:
    name = f"npbench{os.getpid()}{time.monotonic_ns() % 10000}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    return name


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def count_rules(mode: str, ns: str) -> int:
    if mode.startswith("iptables"):
        cmd = "iptables-nft-save" if mode == "iptables-nft" else "iptables-legacy-save"
        out = subprocess.run(["ip", "netns", "exec", ns, cmd], capture_output=True, text=True).stdout
        return sum(1 for ln in out.splitlines() if ln.startswith("-A "))
    return -1


def floor_iptables(text: str) -> float:
    ns = netns()
    try:
        t0 = time.perf_counter()
        subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy-restore", "-w", "--noflush"], input=text,
                       text=True, check=True)
        return time.perf_counter() - t0
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


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
        subprocess.run(["ip", "netns", "exec", ns, "nft", "delete", "element", "ip", table, "no-endpoint-services",
                        elem], check=True)
    return pct(times, 0.5)


async def one_service_cases(proxy: Proxy, objs: list, n: int, eps: int, changes: int) -> dict[str, list[float]]:
    """Time single-Service syncs: add (Service + its slice), eps (one endpoint replaced), del (Service gone)."""
    port, ep_port = [{"name": "http", "port": 80, "protocol": "TCP"}], [{"name": "http", "port": 8080,
                                                                         "protocol": "TCP"}]
    times: dict[str, list[float]] = {"add": [], "eps": [], "del": []}

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
        new = endpoint_slice(f"svc{i}", ep_port,
                             [{"ip": ep(i, k)} for k in range(eps - 1)] + [{"ip": f"10.99.{c // 250}.{c % 250 + 1}"}],
                             namespace=s["metadata"]["namespace"])
        proxy.on_endpoint_slice(new)
        await timed("eps")
    for s, sl in added:  # the Service and its slice go in one sync
        proxy.on_service(s, None)
        proxy.on_endpoint_slice(sl, removed=True)
        await timed("del")
    return times


async def run_mode(label: str, n: int, eps: int, changes: int, args) -> dict:
    mode, opts = MODES[label]
    ns = netns()
    worker = NetnsWorker(ns)
    node = NodeConfig(node_name="bench", cluster_cidr="10.100.0.0/14")
    proxier = make_proxier(mode, node, **opts)
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
        t0 = time.perf_counter()
        r = await proxy.sync()
        out["full"] = time.perf_counter() - t0
        out["rules"] = r.rules if r else 0
        out["chains"] = r.chains if r else 0
        t0 = time.perf_counter()
        await proxy.sync(full=True)
        out["resync"] = time.perf_counter() - t0
        cases = await one_service_cases(proxy, objs, n, eps, changes)
        out["cases"] = {k: (pct(v, 0.5), pct(v, 0.99)) for k, v in cases.items()}
        times = cases["eps"]
        out["change_p50"], out["change_p99"] = pct(times, 0.5), pct(times, 0.99)
        if label == "iptables" and not args.no_floor:
            from netproxy.iptables.plan import full_restore

            out["floor"] = floor_iptables(full_restore(proxier.plans, node))
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
    p.add_argument("--modes", default="iptables,iptables-restore,nftables",
                   help=f"comma-separated, from {', '.join(MODES)} (iptables-nft is slow: 56 s at 10k)")
    p.add_argument("--endpoints", type=int, default=3)
    p.add_argument("--changes", type=int, default=20, help="one-Service changes measured per run")
    p.add_argument("--nft-floor-max", type=int, default=5000, help="skip the nft -f floor above this size")
    p.add_argument("--no-floor", action="store_true")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces, netfilter)", file=sys.stderr)
        return 1
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus (shared machine)")
    print(f"{'mode':18} {'svcs':>6} {'rules':>7} {'full s':>8} {'floor s':>8} {'ratio':>6} {'resync s':>9} "
          f"{'1-svc p50 ms':>13} {'p99 ms':>8} {'floor 1-elem ms':>15}")
    for size in [int(x) for x in args.sizes.split(",")]:
        for label in args.modes.split(","):
            r = asyncio.run(run_mode(label, size, args.endpoints, args.changes, args))
            floor = r.get("floor")
            ratio = f"{r['full'] / floor:.2f}" if floor else "-"
            fe = f"{r['floor_elem'] * 1e3:.1f}" if r.get("floor_elem") else "-"
            print(f"{label:18} {size:>6} {r['rules']:>7} {r['full']:>8.2f} {floor or 0:>8.2f} {ratio:>6} "
                  f"{r['resync']:>9.2f} {r['change_p50'] * 1e3:>13.1f} {r['change_p99'] * 1e3:>8.1f} {fe:>15}",
                  flush=True)
            cases = "  ".join(f"{k} p50 {a * 1e3:.2f} / p99 {b * 1e3:.2f} ms" for k, (a, b) in r["cases"].items())
            print(f"{'':18} {size:>6}   one Service: {cases}" +
                  (f"  | nft -f one element: {r['floor_elem'] * 1e3:.1f} ms" if r.get("floor_elem") else ""),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

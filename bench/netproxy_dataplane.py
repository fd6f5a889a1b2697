#!/usr/bin/env python3
"""Data-plane cost per mode: TCP connect latency to the LAST-added Service at 10 vs 10,000 Services.

A lab (node netns with a bridge, one backend pod, one client netns outside the
cluster) gets N Services (N-1 decoys with 3 endpoints each, the last one backed
by the real pod); the client then times `--connects` sequential connects to the
last Service's ClusterIP (connect + one-line reply + close, measured inside one
Python process in the client netns). The reference printed beside: the same
connect straight to the pod IP (no Service rules on the path beyond the lookup).
Run as root:

    .venv/bin/python bench/netproxy_dataplane.py --sizes 10,10000 --modes iptables,nftables
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import add_plot_argument, pct, plot_lines
from kernel.netns import NetnsWorker
from netproxy.backends import make_proxier
from netproxy.proxier import NodeConfig
from netproxy.proxy import Proxy
from nodeagent.testing.netproxy_lab import Lab, endpoint_slice, service


async def measure(mode: str, n: int, connects: int) -> tuple[float, float, float, float, float]:
    lab = Lab()
    worker = None
    try:
        pod_ip = lab.add_pod("backend")
        lab.add_client()
        client = lab.clients["client"]
        worker = NetnsWorker(lab.node)
        node = NodeConfig(node_name="bench", cluster_cidr=lab.cluster_cidr)
        kind, _, backend = mode.partition("-")  # iptables (nf_tables writer), iptables-legacy, nftables, ipvs
        proxy = Proxy(make_proxier(kind, node, **({"backend": backend} if backend else {})), worker,
                      clear_conntrack=False)
        port = [{"name": "http", "port": 80, "protocol": "TCP"}]
        for i in range(n - 1):
            proxy.on_service(None, service(f"decoy{i}", f"10.96.{i // 250}.{i % 250 + 1}", port))
            decoys = [{"ip": f"10.{200 + k}.{i // 250}.{i % 250 + 1}"} for k in range(3)]
            proxy.on_endpoint_slice(endpoint_slice(f"decoy{i}", [{"name": "http", "port": 8080}], decoys))
        last_vip = "10.97.255.254"
        proxy.on_service(None, service("last", last_vip, port))
        proxy.on_endpoint_slice(endpoint_slice("last", [{"name": "http", "port": 8080}], [{"ip": pod_ip}]))
        proxy.set_services_synced()
        proxy.set_endpoints_synced()
        await proxy.sync()
        lab.ip_batch(lab.node, ["route add 10.97.0.0/16 dev " + lab.bridge])
        warm = await asyncio.to_thread(lab.connect, client, "tcp", last_vip, 80, 50)
        assert all(a.startswith("backend") for a, _ in warm), warm[:3]
        svc = [t for a, t in await asyncio.to_thread(lab.connect, client, "tcp", last_vip, 80, connects)
               if a.startswith("backend")]
        direct = [t for a, t in await asyncio.to_thread(lab.connect, client, "tcp", pod_ip, 8080, connects)
                  if a.startswith("backend")]
        rules = proxy.stats.last.rules if proxy.stats.last else 0
        await proxy.cleanup()
        return pct(svc, 0.5), pct(svc, 0.99), pct(direct, 0.5), pct(direct, 0.99), rules
    finally:
        if worker:
            worker.close()
        lab.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10,10000")
    p.add_argument("--modes", default="iptables,iptables-legacy,nftables",
                   help="iptables: iptables-nft rules written over nf_tables netlink (the default backend); "
                        "iptables-legacy: x_tables")
    p.add_argument("--connects", type=int, default=2000)
    add_plot_argument(p)
    args = p.parse_args()
    if os.geteuid() != 0:
        print("needs root", file=sys.stderr)
        return 1
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus (shared machine)")
    print(f"{'mode':16} {'services':>8} {'rules':>7} {'svc p50 us':>11} {'svc p99 us':>11} "
          f"{'direct p50 us':>14} {'direct p99 us':>14}  load")
    lines: dict[str, list[tuple[float, float]]] = {}
    for mode in args.modes.split(","):
        for n in [int(x) for x in args.sizes.split(",")]:
            s50, s99, d50, d99, rules = asyncio.run(measure(mode, n, args.connects))
            for name, v in ((f"{mode} Service p50", s50), (f"{mode} Service p99", s99),
                            (f"{mode} direct to pod p50 (reference)", d50)):
                lines.setdefault(name, []).append((n, v * 1e6))
            print(f"{mode:16} {n:>8} {rules:>7} {s50 * 1e6:>11.0f} {s99 * 1e6:>11.0f} {d50 * 1e6:>14.0f} "
                  f"{d99 * 1e6:>14.0f}  {os.getloadavg()[0]:.1f}", flush=True)
    if args.plot:
        plot_lines(args.plot, lines, "TCP connect to the last-added Service", "Services", "µs", logx=True)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""NetworkPolicy cost per mode: programming 1,000 policies over 2,000 pods, one label change, connect latency.

A node netns (netproxy's Lab: a bridge and two real pods, "client" and "server") gets 2,000 pods (the two
real ones plus synthetic ones spread over 20 namespaces on this node) and N policies (podSelector on an
app label, ingress from a pod label OR a namespace label on a number and a named port; every 4th also
isolates egress to an ipBlock with an except). Measured, per mode:

- program: time to compute the model from the objects and to write it to the kernel (one full sync);
- label change: time from a pod label change (the client gains the label that admits it) to its set
  elements being written (p50/p99 over `--changes` flips), with the flip checked by a real connection;
- connect: p50/p99 of sequential TCP connects client → server (connect + reply + close) with 0 policies
  (the reference) and with N policies, the server selected by the LAST policy (whole dispatch walked).

Run as root (numbers come from a shared, busy 2-core machine):

    .venv/bin/python bench/netpol.py --modes iptables,nftables --pods 2000 --policies 1000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import add_plot_argument, pct, plot_bars
from nodeagent.testing.netpol_lab import PolicyLab, pod_object, policy


def connect_times(c: PolicyLab, n: int) -> list[float]:
    lab = c.labs["node1"]
    out = lab.connect(lab.pod_netns("default-client"), "tcp", c.ip("default/server"), 8080, count=n,
                      timeout=2)
    bad = [a for a, _ in out if not a.startswith("default-server")]
    if bad:
        raise RuntimeError(f"connects failed: {bad[:3]}")
    return [t for _, t in out]


def synthetic(c: PolicyLab, pods: int, policies: int) -> tuple[list[dict], list[dict]]:
    n = c.labs["node1"].n
    objs = []
    for i in range(pods):
        ns = f"ns{i % 20}"
        ip = f"10.{n}.{1 + i // 250}.{1 + i % 250}"
        objs.append(pod_object(f"p{i}", ns, ip, "node1", {"app": f"app-{i % 100}", "role": f"r{i % 7}"},
                               {"http": 8000 + i % 50}))
    pols = []
    for i in range(policies):
        spec = {"podSelector": {"matchLabels": {"app": f"app-{i % 100}"}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": f"r{i % 7}"}}},
                                      {"namespaceSelector": {"matchLabels": {"team": f"t{i % 5}"}}}],
                             "ports": [{"port": 8080}, {"port": "http"}]}]}
        if i % 4 == 0:
            spec["policyTypes"] = ["Ingress", "Egress"]
            block = {"cidr": "10.0.0.0/8", "except": [f"10.{i % 200}.0.0/16"]}
            spec["egress"] = [{"to": [{"ipBlock": block}]}]
        pols.append(policy(f"pol{i}", f"ns{i % 20}", spec))
    return objs, pols


def run_mode(mode: str, pods: int, policies: int, connects: int, changes: int) -> dict:
    c = PolicyLab(mode, nodes=1)
    try:
        for k in range(20):
            c.namespace(f"ns{k}", {"team": f"t{k % 5}"})
        c.namespace("default")
        c.add_pod("node1", "server", labels={"app": "server"})
        c.add_pod("node1", "client", labels={"role": "client"})
        e = c.enforcers["node1"]
        c.sync(full=True)
        base = connect_times(c, connects)

        objs, pols = synthetic(c, pods - 2, policies - 1)
        t0 = time.perf_counter()
        for o in objs:
            e.on_pod(f"{o['metadata']['namespace']}/{o['metadata']['name']}", o)
        for p in pols:
            e.on_policy(f"{p['metadata']['namespace']}/{p['metadata']['name']}", p)
        # the last policy selects the real server: admit pods labelled access=yes on 8080
        e.on_policy("default/zz-server", policy("zz-server", "default", {
            "podSelector": {"matchLabels": {"app": "server"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"access": "yes"}}}],
                         "ports": [{"port": 8080}]}]}))
        t_model = time.perf_counter() - t0
        ch = e.model.take_changes()
        ch.full = True
        t1 = time.perf_counter()
        e.worker.call(e.backend.sync, e.model, ch)
        t_kernel = time.perf_counter() - t1
        if c.connect("default/client", "default/server") != "blocked":
            raise RuntimeError("the server is not isolated after programming")

        label_times = []
        for k in range(changes):
            labels = {"role": "client", "access": "yes"} if k % 2 == 0 else {"role": "client"}
            t2 = time.perf_counter()
            c.relabel("default/client", labels)
            c.sync()
            label_times.append(time.perf_counter() - t2)
            want = "ok" if k % 2 == 0 else "blocked"
            if c.connect("default/client", "default/server") != want:
                raise RuntimeError(f"label change {k} did not take effect")
        c.relabel("default/client", {"role": "client", "access": "yes"})
        c.sync()
        loaded = connect_times(c, connects)
        c.cleanup()
        left = c.leftovers()
        return {"mode": mode, "pods": len(e.model.pods), "policies": len(e.model.policies),
                "sets": len(e.model.set_kinds), "program_model_s": round(t_model, 3),
                "program_kernel_s": round(t_kernel, 3),
                "label_change_p50_ms": round(pct(label_times, 0.5) * 1e3, 2),
                "label_change_p99_ms": round(pct(label_times, 0.99) * 1e3, 2),
                "connect_0_policies_p50_ms": round(pct(base, 0.5) * 1e3, 3),
                "connect_0_policies_p99_ms": round(pct(base, 0.99) * 1e3, 3),
                f"connect_{policies}_policies_p50_ms": round(pct(loaded, 0.5) * 1e3, 3),
                f"connect_{policies}_policies_p99_ms": round(pct(loaded, 0.99) * 1e3, 3),
                "left_after_cleanup": left}
    finally:
        c.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="iptables,nftables")
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--policies", type=int, default=1000)
    ap.add_argument("--connects", type=int, default=300)
    ap.add_argument("--changes", type=int, default=20, help="label flips timed")
    add_plot_argument(ap)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    bars: dict[str, dict[str, float]] = {}
    for mode in args.modes.split(","):
        r = run_mode(mode, args.pods, args.policies, args.connects, args.changes)
        print(json.dumps(r), flush=True)
        for label, key in (("label change", "label_change"), ("connect, 0 policies", "connect_0_policies"),
                           (f"connect, {args.policies} policies", f"connect_{args.policies}_policies")):
            for q in ("p50", "p99"):
                bars.setdefault(f"{label} {q}", {})[mode] = r[f"{key}_{q}_ms"]
    if args.plot:
        plot_bars(args.plot, bars, f"NetworkPolicy, {args.pods} pods and {args.policies} policies", "ms",
                  logy=True)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

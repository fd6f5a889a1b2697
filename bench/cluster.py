"""Multi-node figures on a 3-node netns lab (`nodeagent lab`), one lab per pod network backend.

Per backend: pod-to-pod RTT (busybox ping, p50/p99) and TCP throughput (iperf3, Debian's) between pods on
different nodes, beside the same figures between two pods on ONE node (the reference: no underlay, no
encapsulation) measured in the same lab. On the first backend also: the time for a Deployment of --pods
pods to be Running across the nodes (and how they spread), and the time from a node's agent being killed
to its pods Running elsewhere (node-monitor grace --grace s + tolerationSeconds --toleration s + restart).
Run as root from the project's venv; the machine is shared, so the figures carry its load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import add_plot_argument, pct, plot_bars
from nodeagent.lab import cluster
from nodeagent.testing.images import ImageFactory
from tests.e2e.cluster.lab import HTTPD, Lab, pod_pid

SLEEP = ["sleep", "36000"]


def pod(name: str, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench": "net"}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": HTTPD, "imagePullPolicy": "Never",
                                     "command": SLEEP}]}}


def rtt(pid: int, ip: str, count: int) -> list[float]:
    out = subprocess.run(["nsenter", "-t", str(pid), "-n", "busybox", "ping", "-c", str(count), "-i", "0.05",
                          "-W", "2", ip], capture_output=True, text=True, check=False).stdout
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", out)]


def throughput(server_pid: int, client_pid: int, ip: str, seconds: int) -> float:
    """Gbit/s received, one TCP stream."""
    srv = subprocess.Popen(["nsenter", "-t", str(server_pid), "-n", "iperf3", "-s", "-1", "-p", "5201"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            p = subprocess.run(["nsenter", "-t", str(client_pid), "-n", "iperf3", "-c", ip, "-p", "5201",
                                "-t", str(seconds), "-J"], capture_output=True, text=True, check=False)
            try:
                return json.loads(p.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9
            except (ValueError, KeyError):
                err = (p.stdout[-300:] + p.stderr[-300:]).strip()
            time.sleep(0.2)
        raise RuntimeError(f"iperf3 failed: {err}")
    finally:
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()


def network_figures(lab: Lab, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    for name, node in (("a1", "node1"), ("a2", "node1"), ("b", "node2")):
        lab.apply(pod(name, node))
    pods = {p["metadata"]["name"]: p for p in lab.running("bench=net", 3)}
    pid = {n: pod_pid(p["metadata"]["uid"]) for n, p in pods.items()}
    ip = {n: p["status"]["podIP"] for n, p in pods.items()}
    out = {}
    for label, dst in (("same-node", "a2"), ("cross-node", "b")):
        times = rtt(pid["a1"], ip[dst], args.pings)
        gbps = throughput(pid[dst], pid["a1"], ip[dst], args.iperf_seconds)
        out[label] = {"rtt_p50_ms": pct(times, 0.5), "rtt_p99_ms": pct(times, 0.99),
                      "lost": args.pings - len(times), "gbps": gbps}
    lab.kubectl("delete", "pods", "-l", "bench=net", "--wait=false")
    return out


def routed(lab: Lab, node: str, cidr: str) -> bool:
    """`node` has a route for `cidr` that is not a blackhole (BIRD's, or nodenet's own)."""
    out = lab.on_node(node, "ip", "route", "show", "exact", cidr).stdout
    return bool(out.strip()) and "blackhole" not in out


def join_convergence(lab: Lab, joins: int) -> tuple[list[float], list[float]]:
    """The last node leaves (agent stopped, Node deleted) and joins again, `joins` times: per join, the
    seconds from its agent starting to its podCIDR routed on every other node, and from its Node
    publishing its address and podCIDR (the cluster knowing it) to that."""
    node = lab.topo.nodes[-1]
    others = [n.name for n in lab.topo.nodes[:-1]]
    total, converge = [], []
    for _ in range(joins):
        cidr = lab.get("node", node.name)["spec"]["podCIDR"]
        state = cluster.load(lab.topo.lab_dir)
        cluster._kill_pid(state["pids"][node.name], 30)
        lab.kubectl("delete", "node", node.name)
        lab.wait("the left node's routes gone",
                 lambda c=cidr: not any(routed(lab, o, c) for o in others), 120, interval=0.1)
        t0 = time.monotonic()
        cluster.start_agent(lab.topo, node)
        known = None
        while True:
            try:
                n = lab.get("node", node.name)
            except AssertionError:
                n = {}
            a = (n.get("metadata") or {}).get("annotations") or {}
            cidr = (n.get("spec") or {}).get("podCIDR")
            if cidr and a.get("nodenet.nodeagent.io/public-ip"):
                known = known or time.monotonic()
                if all(routed(lab, o, cidr) for o in others):
                    break
            if time.monotonic() - t0 > 180:
                raise RuntimeError(f"{node.name}'s podCIDR not routed on {others} within 180s")
            time.sleep(0.05)
        done = time.monotonic()
        total.append(done - t0)
        converge.append(done - (known or done))
    return total, converge


def deployment(name: str, replicas: int, tolerations: list | None = None) -> dict:
    spec = {"terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": HTTPD, "imagePullPolicy": "Never", "command": SLEEP}]}
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def running(lab: Lab, selector: str, exclude_node: str | None = None) -> list[dict]:
    return [p for p in lab.pods(selector) if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName") != exclude_node]


def rollout(lab: Lab, n: int) -> tuple[float, dict[str, int]]:
    t0 = time.monotonic()
    lab.apply(deployment("many", n))
    while True:
        r = running(lab, "app=many")
        if len(r) >= n:
            dt = time.monotonic() - t0
            spread: dict[str, int] = {}
            for p in r:
                spread[p["spec"]["nodeName"]] = spread.get(p["spec"]["nodeName"], 0) + 1
            lab.kubectl("delete", "deployment", "many", "--wait=false")
            return dt, spread
        if time.monotonic() - t0 > 1800:
            raise TimeoutError(f"{len(r)}/{n} running after 30 min")
        time.sleep(1)


def failover(lab: Lab, replicas: int, toleration: int) -> tuple[float, int]:
    tol = [{"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": toleration}
           for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]
    for n in ("node1", "node2"):
        lab.kubectl("cordon", n)
    lab.apply(deployment("victim", replicas, tol))
    while len(running(lab, "app=victim")) < replicas:
        time.sleep(0.5)
    for n in ("node1", "node2"):
        lab.kubectl("uncordon", n)
    t0 = time.monotonic()
    os.kill(lab.state["pids"]["node3"], signal.SIGKILL)
    while len(running(lab, "app=victim", exclude_node="node3")) < replicas:
        if time.monotonic() - t0 > 600:
            raise TimeoutError("pods not replaced")
        time.sleep(0.5)
    return time.monotonic() - t0, replicas


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="host-gw,ipip,vxlan,bgp",
                    help="backends to compare (default: %(default)s)")
    ap.add_argument("--pods", type=int, default=300, help="Deployment size for the rollout figure")
    ap.add_argument("--pings", type=int, default=200, help="pings per RTT figure")
    ap.add_argument("--iperf-seconds", type=int, default=5, help="iperf3 duration per throughput figure")
    ap.add_argument("--failover-pods", type=int, default=10, help="pods on the node whose agent is killed")
    ap.add_argument("--grace", type=float, default=10.0, help="server --node-monitor-grace-period (s)")
    ap.add_argument("--toleration", type=int, default=5, help="pods' not-ready/unreachable tolerationSeconds")
    ap.add_argument("--joins", type=int, default=10,
                    help="node re-joins per backend for the convergence figure (0: none)")
    ap.add_argument("--join-modes", default="host-gw,bgp",
                    help="backends whose join convergence is measured (default: %(default)s)")
    ap.add_argument("--no-rollout", action="store_true", help="skip the rollout and failover figures")
    add_plot_argument(ap)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    try:
        return run(args, tmp)
    finally:
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def run(args: argparse.Namespace, tmp: Path) -> int:
    image = ImageFactory(tmp / "images").httpd.docker_archive
    first = True
    rtts: dict[str, dict[str, float]] = {}
    print(f"3-node netns lab; machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} (shared, busy)")
    for mode in args.modes.split(","):
        try:
            t0 = time.monotonic()
            topo = cluster.up(tmp / f"lab-{mode}", 3, mode, [str(image)],
                              node_monitor_grace_period=args.grace)
        except cluster.LabError as e:
            print(f"{mode}: unavailable here: {str(e).splitlines()[-1][:200]}")
            continue
        lab = Lab(topo)
        try:
            print(f"{mode}: lab up (3 nodes Ready) in {time.monotonic() - t0:.1f}s")
            figs = network_figures(lab, args)
            for label, f in figs.items():
                print(f"  {mode:8s} {label:10s} RTT p50 {f['rtt_p50_ms']:.3f} ms  "
                      f"p99 {f['rtt_p99_ms']:.3f} ms  (lost {f['lost']}/{args.pings})  "
                      f"TCP {f['gbps']:.2f} Gbit/s")
                rtts[f"{mode} {label}"] = {"p50": f["rtt_p50_ms"], "p99": f["rtt_p99_ms"]}
            if args.joins and mode in args.join_modes.split(","):
                total, conv = join_convergence(lab, args.joins)
                print(f"  {mode:8s} node join -> its podCIDR routed on every other node: p50 "
                      f"{pct(total, 0.5):.2f}s p99 {pct(total, 0.99):.2f}s from the agent's start; p50 "
                      f"{pct(conv, 0.5):.3f}s p99 {pct(conv, 0.99):.3f}s from its Node published "
                      f"({args.joins} joins)")
            if first and not args.no_rollout:
                first = False
                dt, spread = rollout(lab, args.pods)
                print(f"  {args.pods}-pod Deployment Running in {dt:.1f}s ({args.pods / dt:.1f} pods/s), "
                      f"spread {dict(sorted(spread.items()))}")
                while lab.pods("app=many"):
                    time.sleep(1)
                dt, n = failover(lab, args.failover_pods, args.toleration)
                print(f"  node agent killed -> its {n} pods Running elsewhere in {dt:.1f}s "
                      f"(grace {args.grace:.0f}s + tolerationSeconds {args.toleration}s + reschedule/start)")
        finally:
            cluster.down(topo.lab_dir)
    if args.plot:
        plot_bars(args.plot, rtts, "pod-to-pod RTT per backend, 3-node lab", "ms", logy=True)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

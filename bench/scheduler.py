"""Scheduler throughput on in-memory nodes, modelled on kube-scheduler's scheduler_perf workloads.

Each workload creates N nodes (4 cpu, 32Gi, 110 pods, like scheduler_perf's node-default), lets
the scheduler place the init pods, then times how fast the measured pods are bound (pods/s) —
binding through the in-memory fake API (no apiserver, no kubelets). Printed beside
kube-scheduler's scheduler_perf thresholds at 5,000 nodes (real apiserver, fake nodes).
Pod templates and init/measured counts follow scheduler_perf's performance-config.yaml:
SchedulingBasic, SchedulingNodeAffinity, SchedulingPodAntiAffinity, PreemptionAsync (the
workload the 570 pods/s preemption threshold belongs to: 100m default pods measured while a
3-cpu high-priority pod arrives every 200 ms and preempts) and PreemptionBasic (only 3-cpu
high-priority pods, each preempting three 900m pods; upstream has no 5,000-node threshold).

Then the through-the-apiserver figure: a real `nodeagent server` with N Node objects, its own
scheduler binding through pods/<name>/binding, timed by a watch (--apiserver NODES), for any of the
workloads (--apiserver-workloads; PodAntiAffinity's namespaces, PreemptionAsync's churn and a PriorityClass
for the high-priority pods made through the API). --py-spy samples the server's wall time; --cpu-profile
runs it under bench/cpuprofile.py and splits its CPU by component.

    .venv/bin/python bench/scheduler.py --nodes 100,1000,5000
    .venv/bin/python bench/scheduler.py --nodes 5000 --workloads basic --profile --apiserver ''
    .venv/bin/python bench/scheduler.py --nodes '' --apiserver 500 \
        --apiserver-workloads nodeaffinity,antiaffinity,preemption
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import itertools
import os
import pstats
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import pyspy
from bench.report import add_plot_argument, plot_lines
from nodeagent.scheduler.profile import SchedulerConfig
from nodeagent.scheduler.scheduler import Scheduler
from nodeagent.testing.fake_cluster import FakeCluster, make_node, make_pod

# kube-scheduler scheduler_perf thresholds at 5000 nodes (pods/s)
SORT = "cumulative"
# (PreemptionBasic has none: upstream disables its 5000-node case as too slow, kubernetes#108308.
# The 570 belongs to PreemptionAsync: default pods measured while 3-cpu preemptors arrive at 5/s.)
THRESHOLDS: dict[str, int | None] = {"basic": 680, "nodeaffinity": 220, "antiaffinity": 60,
                                     "preemption": 570, "preemptionbasic": None}
NAMES = {"basic": "SchedulingBasic", "nodeaffinity": "SchedulingNodeAffinity",
         "antiaffinity": "SchedulingPodAntiAffinity", "preemption": "PreemptionAsync",
         "preemptionbasic": "PreemptionBasic"}
# scheduler_perf runs kube-apiserver and kube-scheduler alone: no controllers, DNS, ingress or pod network
# components, and no metrics-server (whose scrape of N kubelet-less nodes every 15 s would be counted here)
SERVER_ARGS = ["--controllers", "none", "--without", "ingress", "--without", "podnetwork",
               "--metric-resolution", "86400"]
CHURN_INTERVAL = 0.2  # PreemptionAsync: one high-priority pod every 200 ms (scheduler_perf's churn op)


def _pod(kind: str, i: int, phase: str) -> dict[str, Any]:
    port = [{"containerPort": 80}]
    if kind == "basic":
        p = make_pod(f"{phase}-{i}", cpu="100m", memory="500Mi")
    elif kind == "nodeaffinity":
        p = make_pod(f"{phase}-{i}", cpu="100m", memory="500Mi", affinity={"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone1", "zone2"]}]}]}}})
    elif kind == "antiaffinity":
        ns = "sched-0" if phase == "init" else "sched-1"
        p = make_pod(f"{phase}-{i}", cpu="100m", memory="500Mi", namespace=ns, labels={"color": "green"},
                     affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                         "labelSelector": {"matchLabels": {"color": "green"}},
                         "topologyKey": "kubernetes.io/hostname", "namespaces": ["sched-0", "sched-1"]}]}})
    elif kind in ("preemption", "preemptionbasic"):
        # scheduler_perf's pod-low-priority (init), pod-high-priority (PreemptionBasic's measured pods and
        # PreemptionAsync's churn) and pod-default (PreemptionAsync's measured pods)
        if phase == "init":
            p = make_pod(f"{phase}-{i}", cpu="900m", memory="500Mi", terminationGracePeriodSeconds=0)
        elif phase == "churn" or kind == "preemptionbasic":
            p = make_pod(f"{phase}-{i}", cpu="3000m", memory="500Mi", priority=10)
        else:
            p = make_pod(f"{phase}-{i}", cpu="100m", memory="500Mi")
    else:
        raise ValueError(kind)
    p["spec"]["containers"][0]["ports"] = port
    return p


def counts(kind: str, nodes: int) -> tuple[int, int]:
    """(init pods, measured pods), following scheduler_perf's 500- and 5000-node parameters."""
    if kind == "basic":  # upstream: 500 nodes / 500 init / 1000 measured; 5000 / 1000 / 10000 (threshold 680)
        return min(nodes, 1000), (10000 if nodes >= 5000 else 1000)
    if kind == "nodeaffinity":  # upstream: 500 / 500 / 1000; 5000 / 5000 / 10000 (threshold 220)
        return nodes, (10000 if nodes >= 5000 else 1000)
    # antiaffinity: one pod per node; upstream: 500 / 100 / 400; 5000 / 1000 / 2000 (threshold 60)
    if kind == "antiaffinity":
        return nodes // 5, (2000 if nodes >= 5000 else min(1000, nodes - nodes // 5))
    # both preemption workloads: every node holds 4 low-priority 900m pods (3.6 of 4 cpu). PreemptionBasic
    # measures N 3-cpu high-priority pods (each needs 3 victims; upstream: 500/2000/500, 1000/4000/1000,
    # 5000/20000/5000 disabled); PreemptionAsync measures N 100m default pods (upstream 500/2000/500,
    # 5000/20000/5000 with threshold 570) while a 3-cpu high-priority pod arrives every 200 ms.
    return 4 * nodes, nodes


class _BoundCounter:
    """Counts binds of pods whose name starts with `prefix` (the measured pods, not the churn)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.bound = 0
        self.target = 0
        self.done = asyncio.Event()

    def on_add(self, kind: str, obj: dict[str, Any]) -> None:
        pass

    def on_delete(self, kind: str, obj: dict[str, Any]) -> None:
        pass

    def on_update(self, kind: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        if kind == "Pod" and new["spec"].get("nodeName") and not old["spec"].get("nodeName") \
                and new["metadata"]["name"].startswith(self.prefix):
            self.bound += 1
            if self.target and self.bound >= self.target:
                self.done.set()


async def _churn(cluster: FakeCluster, kind: str) -> None:
    for i in itertools.count():
        await asyncio.sleep(CHURN_INTERVAL)
        cluster.add_pod(_pod(kind, i, "churn"))


async def run_one(kind: str, n_nodes: int, profile: bool, measure: int | None = None
                  ) -> tuple[float, float, int, dict[str, int]]:
    cluster = FakeCluster()
    sched = Scheduler(SchedulerConfig(), cluster.api(), rng=random.Random(42))
    cluster.subscribe(sched)
    counter = _BoundCounter("measure-")
    cluster.subscribe(counter)
    for i in range(n_nodes):
        labels = {"topology.kubernetes.io/zone": "zone1"} if kind == "nodeaffinity" else {}
        cluster.add_node(make_node(f"node-{i}", cpu="4", memory="32Gi", pods=110, labels=labels))
    n_init, n_measure = counts(kind, n_nodes)
    if measure is not None:
        n_measure = measure
    counter.target = n_measure
    task = asyncio.create_task(sched.run())
    for i in range(n_init):
        cluster.add_pod(_pod(kind, i, "init"))
    await sched.wait_scheduled(n_init)
    measured = [_pod(kind, i, "measure") for i in range(n_measure)]
    gc.collect()
    prof = cProfile.Profile() if profile else None
    t0 = time.perf_counter()
    c0 = time.process_time()
    if prof:
        prof.enable()
    churn = asyncio.create_task(_churn(cluster, kind)) if kind == "preemption" else None
    for p in measured:
        cluster.add_pod(p)
    await counter.done.wait()
    if prof:
        prof.disable()
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    for t in (churn, task):
        if t is None:
            continue
        t.cancel()
        try:
            await t
        except asyncio.CancelledError:
            pass
    if prof:
        pstats.Stats(prof).sort_stats(SORT).print_stats(25)
    return n_measure / dt, n_measure / cpu, n_measure, dict(sched.stats)

# -- through the apiserver ------------------------------------------------------------------------------


def _load_average() -> str:
    """The host's 1-minute load average: the CPU figures of this shared machine need it beside them."""
    return f"{os.getloadavg()[0]:.1f}"


def _server_cpu(pid: int) -> float:
    """CPU seconds of the server process (where the scheduler runs), summed over its threads' schedstat in
    nanoseconds: /proc/PID/stat counts clock ticks of 10 ms, fewer than a short measured phase (a few pods
    on a fast server) can spend. The server's threads live as long as it does (loop, executor, gRPC), so a
    thread ending between two readings, whose time this would lose, is not expected."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


async def _create_all(client: Any, resource: str, objs: list[dict[str, Any]], namespace: str | None,
                      parallel: int = 32) -> None:
    sem = asyncio.Semaphore(parallel)

    async def one(o: dict[str, Any]) -> None:
        async with sem:
            await client.create(resource, o, namespace)
    await asyncio.gather(*(one(o) for o in objs))


# PreemptionAsync's and PreemptionBasic's high-priority pods carry `spec.priority: 10` in scheduler_perf,
# whose test apiserver runs with the Priority admission plugin off; this server keeps it on (a pod may not
# name its own priority), so the same value comes from a PriorityClass, as on a real cluster
HIGH_PRIORITY = "sched-perf-high"
HIGH_PRIORITY_CLASS: dict[str, Any] = {
    "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": HIGH_PRIORITY},
    "value": 10, "description": "scheduler_perf's pod-high-priority (priority 10)"}


def _api_pod(kind: str, i: int, phase: str) -> tuple[dict[str, Any], str]:
    """The workload's pod as a client sends it (no uid, status or timestamps), and its namespace."""
    p = _pod(kind, i, phase)
    meta, spec = p["metadata"], dict(p["spec"])
    if spec.pop("priority", None):
        spec["priorityClassName"] = HIGH_PRIORITY
    return ({"apiVersion": "v1", "kind": "Pod", "spec": spec,
             "metadata": {"name": meta["name"], "labels": meta["labels"]}}, meta["namespace"])


async def _create_pods(client: Any, pods: list[tuple[dict[str, Any], str]], parallel: int = 32) -> None:
    sem = asyncio.Semaphore(parallel)

    async def one(o: dict[str, Any], ns: str) -> None:
        async with sem:
            await client.create("pods", o, ns)
    await asyncio.gather(*(one(o, ns) for o, ns in pods))


async def _api_churn(client: Any, kind: str) -> None:
    """scheduler_perf's churn op of PreemptionAsync: one high-priority 3-cpu pod every 200 ms."""
    for i in itertools.count():
        await asyncio.sleep(CHURN_INTERVAL)
        pod, ns = _api_pod(kind, i, "churn")
        await client.create("pods", pod, ns)


@contextlib.contextmanager
def _cpu_profiled(pid: int, out: Path) -> Iterator[None]:
    """The server's CPU profile of the block (bench/cpuprofile.py's SIGUSR2 switch), printed at its end."""
    from bench import cpuprofile
    os.kill(pid, signal.SIGUSR2)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGUSR2)
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        kept = Path(tempfile.gettempdir()) / f"cpuprofile-{pid}.pstats"
        shutil.copyfile(out, kept)
        print(cpuprofile.split(str(kept)) + f"\n(pstats: {kept})", flush=True)


async def run_apiserver(kind: str, n_nodes: int, data_dir: Path, measure: int | None = None,
                        py_spy: bool = False, cpu_profile: bool = False
                        ) -> tuple[float, float, int, float, float, int]:
    """The same workload through a real `nodeagent server` (memory store, controllers off): N Node
    objects with no kubelets behind them, pods created over HTTPS, bound by the server's own
    scheduler through pods/<name>/binding (victims of preemption deleted by it through the API); timed
    from the first measured create until a watch has seen every measured pod bound. Returns (wall pods/s,
    server-CPU pods/s, pods, setup seconds, the load generator's own CPU seconds per pod: its creates and
    its watch, apart from the server's; pods deleted as preemption victims in the measured phase)."""
    from nodeagent.client.rest import Client
    from nodeagent.testing.apiserver import start_server
    from nodeagent.testing.hollow import node_object

    t_setup = time.perf_counter()
    pstats_out = data_dir / "cpu.pstats"
    launcher = [str(Path(__file__).with_name("cpuprofile.py")), str(pstats_out)] if cpu_profile else []
    # a loaded host starts it slowly
    srv = start_server(data_dir, extra=SERVER_ARGS, timeout=180, launcher=launcher)
    client = Client.from_kubeconfig(srv.kubeconfig, max_connections=64)
    try:
        nodes = []
        for i in range(n_nodes):
            labels = {"topology.kubernetes.io/zone": "zone1"} if kind == "nodeaffinity" else None
            nodes.append(node_object(f"node-{i}", cpu="4", memory="32Gi", pods="110", labels=labels))
        await _create_all(client, "nodes", nodes, None)
        if kind == "antiaffinity":  # scheduler_perf's createNamespaces op (prefix sched, count 2)
            for n in ("sched-0", "sched-1"):
                await client.create("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": n}})
        if kind in ("preemption", "preemptionbasic"):
            await client.create("priorityclasses", HIGH_PRIORITY_CLASS)
        n_init, n_measure = counts(kind, n_nodes)
        if measure is not None:
            n_measure = measure
            if kind in ("basic", "nodeaffinity"):  # the others' init pods shape the nodes (fill, spread)
                n_init = min(n_init, measure)
        bound: dict[str, int] = {"init": 0, "measure": 0}
        events = {k: asyncio.Event() for k in bound}
        targets = {"init": n_init, "measure": n_measure}
        seen: set[str] = set()
        victims = [0]
        rv = (await client.list("pods", None, limit=1))["metadata"]["resourceVersion"]

        async def watch() -> None:
            async for ev in client.watch("pods", None, resource_version=rv, timeout_seconds=3600):
                obj = ev.get("object") or {}
                name = (obj.get("metadata") or {}).get("name") or ""
                phase = name.split("-", 1)[0]
                if ev.get("type") == "DELETED" and phase == "init":
                    victims[0] += 1
                if ev.get("type") in ("ADDED", "MODIFIED") and (obj.get("spec") or {}).get("nodeName") \
                        and name not in seen:
                    seen.add(name)
                    if phase in bound:
                        bound[phase] += 1
                        if bound[phase] >= targets[phase]:
                            events[phase].set()
        watcher = asyncio.create_task(watch())
        await _create_pods(client, [_api_pod(kind, i, "init") for i in range(n_init)])
        await events["init"].wait()
        measured = [_api_pod(kind, i, "measure") for i in range(n_measure)]
        setup = time.perf_counter() - t_setup
        v0 = victims[0]
        c0 = _server_cpu(srv.proc.pid)
        l0 = time.process_time()
        t0 = time.perf_counter()
        churn = asyncio.create_task(_api_churn(client, kind)) if kind == "preemption" else None
        with pyspy.recording(srv.proc.pid) if py_spy else contextlib.nullcontext(), \
                _cpu_profiled(srv.proc.pid, pstats_out) if cpu_profile else contextlib.nullcontext():
            await asyncio.gather(_create_pods(client, measured), events["measure"].wait())
            dt = time.perf_counter() - t0
            cpu = _server_cpu(srv.proc.pid) - c0
            load_cpu = time.process_time() - l0
        for t in (churn, watcher):
            if t is None:
                continue
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        return n_measure / dt, n_measure / cpu, n_measure, setup, load_cpu / n_measure, victims[0] - v0
    finally:
        await client.close()
        rc = srv.stop()
        if rc not in (0, -15):
            print(srv.log()[-3000:], file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="100,1000,5000", help="comma-separated node counts")
    ap.add_argument("--workloads", default="basic,nodeaffinity,antiaffinity,preemption,preemptionbasic",
                    help="comma-separated: " + ",".join(THRESHOLDS))
    ap.add_argument("--profile", action="store_true", help="cProfile the measured phase and print the top")
    ap.add_argument("--profile-sort", default="cumulative", help="pstats sort key (cumulative, tottime)")
    ap.add_argument("--measure", type=int, default=None,
                    help="measured pods per run (default: the workload's)")
    ap.add_argument("--apiserver", default="1000,5000", metavar="NODES",
                    help="node counts for the through-the-apiserver runs of SchedulingBasic ('' to skip)")
    ap.add_argument("--py-spy", action="store_true",
                    help="sample the server with py-spy during each through-the-apiserver measured phase")
    ap.add_argument("--cpu-profile", action="store_true",
                    help="run the server under bench/cpuprofile.py and print its CPU split by component "
                         "for each through-the-apiserver measured phase (py-spy samples wall time)")
    ap.add_argument("--apiserver-workloads", default="basic",
                    help="workloads for those runs: " + ",".join(THRESHOLDS))
    add_plot_argument(ap)
    args = ap.parse_args(argv)
    lines: dict[str, list[tuple[float, float]]] = {}
    global SORT
    SORT = args.profile_sort
    node_counts = [int(x) for x in args.nodes.split(",") if x]
    kinds = [k for k in args.workloads.split(",") if k]
    print("in-memory scheduler throughput (fake API, no apiserver). The machine is shared "
          "(2 cores, other jobs):")
    print("wall pods/s depends on the load; cpu pods/s divides by this process's CPU time "
          "(load-independent).")
    print(f"{'workload':<28}{'nodes':>7}{'pods':>7}{'wall pods/s':>13}{'cpu pods/s':>12}"
          f"{'kube-scheduler @5000':>22}  verdict (cpu)  preemptions")
    for kind in kinds:
        for n in node_counts:
            rate, cpu_rate, pods, stats = asyncio.run(run_one(kind, n, args.profile, args.measure))
            ref = THRESHOLDS[kind]
            verdict = ("meets" if cpu_rate >= ref else "below") if n == 5000 and ref else ""
            refs = str(ref) if ref else "none upstream"
            print(f"{NAMES[kind]:<28}{n:>7}{pods:>7}{rate:>13.0f}{cpu_rate:>12.0f}{refs:>22}  {verdict:<13}  "
                  f"{stats['preemptions']}", flush=True)
            lines.setdefault(f"{NAMES[kind]} (cpu pods/s)", []).append((n, cpu_rate))
        if THRESHOLDS[kind]:
            lines[f"{NAMES[kind]}: kube-scheduler @5000"] = [(5000, float(THRESHOLDS[kind] or 0))]
    api_counts = [int(x) for x in args.apiserver.split(",") if x]
    if api_counts:
        print()
        print("through the apiserver: a real `nodeagent server` (memory store; apiserver and scheduler "
              "alone, as scheduler_perf)")
        print("with N Node objects")
        print("(no kubelets); pods created over HTTPS, bound by the server's scheduler via "
              "pods/<name>/binding,")
        print("counted bound from a watch. Client and server share the 2 busy cores; server-cpu "
              "divides by the")
        print("server process's CPU time (apiserver + scheduler together); server ms/pod is its inverse;")
        print("load ms/pod is the load generator's own CPU (its creates and its watch), apart.")
        print(f"{'workload':<28}{'nodes':>7}{'pods':>7}{'wall pods/s':>13}{'server-cpu pods/s':>19}"
              f"{'server ms/pod':>15}{'load ms/pod':>13}{'kube-scheduler @5000':>22}{'setup s':>9}"
              f"{'victims':>9}  load average")
        for kind in [k for k in args.apiserver_workloads.split(",") if k]:
            for n in api_counts:
                with tempfile.TemporaryDirectory(prefix="sched-bench-") as d:
                    rate, cpu_rate, pods, setup, load, victims = asyncio.run(
                        run_apiserver(kind, n, Path(d), args.measure, args.py_spy, args.cpu_profile))
                ref = THRESHOLDS[kind]
                print(f"{NAMES[kind]:<28}{n:>7}{pods:>7}{rate:>13.0f}{cpu_rate:>19.0f}"
                      f"{1000 / cpu_rate:>15.2f}{1000 * load:>13.2f}{ref or 'none upstream':>22}{setup:>9.0f}"
                      f"{victims:>9}  {_load_average()}", flush=True)
                lines.setdefault(f"{NAMES[kind]} through the apiserver (server-cpu pods/s)", []).append(
                    (n, cpu_rate))
    if args.plot:
        plot_lines(args.plot, lines, "scheduler throughput against cluster size", "nodes", "pods/s",
                   logx=True)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

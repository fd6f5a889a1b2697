"""The kubelet's housekeeping cost at a full node (issue 23): CPU per pass at 110 pods with the node-pressure
work on (eviction pass, container GC, image GC, the CPU manager's reconcile, a /metrics/resource render)
beside the same pass with it off (the PLEG relist alone: list sandboxes and containers, diff).

The runtime is `nodeagent.testing.fake_cri.FakeRuntime` served over CRI gRPC on a unix socket in this process
(110 real pods are too heavy on a shared 2-core host): every CRI call, its protobuf encoding and the
kubelet's decisions are real; the runtime's own work (cgroup reads, du of writable layers) is not, so the
figures are the kubelet's side. CPU is this process's (client and fake server both), per pass, p50/p99 of
--passes passes, after one warm-up pass of each. Each pod has a running container and a dead earlier
instance (GC keeps it: one dead per container); --limited of them declare an ephemeral-storage limit, so
the eviction pass measures their disk usage every time, as kubelet's localStorageEviction does.

--runtime real (root) runs the same passes against nodeagent's real runtime (`nodeagent cri`, started
privately, no CNI: housekeeping never touches the network): --pods real pods, each with a busybox `sleep`
running and a dead earlier instance, in their own cgroups. Then the runtime's side is real too (cgroup
reads for the stats, du of the writable layers, its image store), and the runtime daemon's CPU per pass
(from /proc/<pid>/task/*/schedstat) is printed beside the kubelet's.

    .venv/bin/python bench/housekeeping.py [--pods 110] [--passes 50] [--limited 10] [--runtime fake|real]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import add_plot_argument, pct, plot_cdf
from cri.client import container_config, sandbox_config
from cri.client.aio import RuntimeClient
from cri.proto import api_pb2 as pb
from nodeagent.clock import REAL_CLOCK
from nodeagent.kubelet.cpumanager.cpuset import Topology
from nodeagent.kubelet.cpumanager.manager import CPUManager
from nodeagent.kubelet.cpumanager.reconcile import CPUReconciler
from nodeagent.kubelet.eviction import EvictionManager, parse_thresholds
from nodeagent.kubelet.evictions import EvictionLoop
from nodeagent.kubelet.gc.containers import ContainerGC, ContainerGCPolicy
from nodeagent.kubelet.gc.images import ImageGC, ImageGCPolicy
from nodeagent.kubelet.labels import CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL
from nodeagent.kubelet.pleg import GenericPLEG, Record
from nodeagent.kubelet.server.exposition import render
from nodeagent.kubelet.server.resource_metrics import ResourceCollector, families
from nodeagent.testing.fake_cri import FakeRuntime, serve


class Recorder:
    def record(self, *a: Any) -> None:
        pass


def _pod(i: int, limited: bool) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "app", "image": "busybox"}
    if limited:
        c["resources"] = {"limits": {"ephemeral-storage": "1Gi"}}
    return {"metadata": {"name": f"p{i}", "namespace": "default", "uid": f"uid-{i:04d}"},
            "spec": {"containers": [c]}, "status": {"phase": "Running"}}


async def populate(cri: Any, pods: list[dict[str, Any]]) -> None:
    for p in pods:
        m = p["metadata"]
        labels = {POD_UID_LABEL: m["uid"], POD_NAME_LABEL: m["name"], POD_NAMESPACE_LABEL: m["namespace"]}
        cfg = pb.PodSandboxConfig(labels=labels)
        cfg.metadata.name, cfg.metadata.uid, cfg.metadata.namespace = m["name"], m["uid"], m["namespace"]
        sid = await cri.run_pod_sandbox(cfg, "")
        for attempt in (0, 1):
            cc = pb.ContainerConfig(labels={**labels, CONTAINER_NAME_LABEL: "app"})
            cc.metadata.name, cc.metadata.attempt = "app", attempt
            cc.image.image = "busybox"
            cid = await cri.create_container(sid, cc, cfg)
            await cri.start_container(cid)
            if attempt == 0:
                await cri.stop_container(cid, 0)


REAL_IMAGE = "localhost/busybox:latest"


def task_cpu_s(pid: int) -> float:
    """CPU time of every thread of `pid` so far (schedstat's nanoseconds: finer than the 10 ms of stat)."""
    total = 0
    for t in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((t / "schedstat").read_text().split()[0])
    return total / 1e9


async def populate_real(cri: RuntimeClient, pods: list[dict[str, Any]], parent: str, logs: Path) -> None:
    """Each pod as kubelet makes it: a sandbox in its pod cgroup, a busybox `sleep` whose earlier instance
    exited (GC keeps one dead per container)."""
    for p in pods:
        m = p["metadata"]
        labels = {POD_UID_LABEL: m["uid"], POD_NAME_LABEL: m["name"], POD_NAMESPACE_LABEL: m["namespace"]}
        cfg = sandbox_config(m["name"], m["namespace"], m["uid"], log_dir=str(logs / m["uid"]),
                             cgroup_parent=f"{parent}/pod{m['uid']}", labels=labels)
        sid = await cri.run_pod_sandbox(cfg)
        for attempt in (0, 1):
            cc = container_config("app", REAL_IMAGE, ["sleep", "3600"], log_path=f"app/{attempt}.log",
                                  attempt=attempt, labels={**labels, CONTAINER_NAME_LABEL: "app"})
            cid = await cri.create_container(sid, cc, cfg)
            await cri.start_container(cid)
            if attempt == 0:
                await cri.stop_container(cid, 0)


@contextlib.asynccontextmanager
async def real_runtime(tmp: Path, pods: list[dict[str, Any]],
                       parent: str) -> AsyncIterator[tuple[RuntimeClient, int]]:
    """`nodeagent cri` started privately with the busybox image and `pods` running; all removed after."""
    from bench.cri_lifecycle import remove_parent
    from nodeagent.testing.images import ImageFactory
    from tests.integration.cri.daemon import CRIDaemon

    d = CRIDaemon(tmp / "runtime")
    d.import_images([ImageFactory(tmp / "build").busybox.docker_archive])
    d.start()
    assert d.proc is not None
    try:
        async with RuntimeClient(d.socket) as cri:
            try:
                t0 = time.perf_counter()
                await populate_real(cri, pods, parent, tmp / "logs")
                print(f"{len(pods)} real pods started in {time.perf_counter() - t0:.1f} s", flush=True)
                yield cri, d.proc.pid
            finally:
                for s in await cri.list_pod_sandbox():
                    with contextlib.suppress(Exception):
                        await cri.stop_pod_sandbox(s.id)
                        await cri.remove_pod_sandbox(s.id)
    finally:
        d.stop()
        remove_parent(parent)


@contextlib.asynccontextmanager
async def fake_runtime(pods: list[dict[str, Any]]) -> AsyncIterator[tuple[RuntimeClient, int]]:
    """The in-process fake over gRPC; no runtime process of its own (pid 0)."""
    async with serve(FakeRuntime(images=("busybox", "httpd"))) as cri:
        await populate(cri, pods)
        yield cri, 0


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-hk-"))
    try:
        await measure(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def measure(args: argparse.Namespace, tmp: Path) -> None:
    pods = [_pod(i, i < args.limited) for i in range(args.pods)]
    parent = f"/nodeagent-bench-hk-{os.getpid()}"
    real = args.runtime == "real"
    runtime = real_runtime(tmp, pods, parent) if real else fake_runtime(pods)
    async with runtime as (cri, runtime_pid):
        pleg = GenericPLEG()

        async def relist() -> None:
            boxes = await cri.list_pod_sandbox()
            ctrs = await cri.list_containers()
            recs = [Record(s.labels.get(POD_UID_LABEL, ""), s.id, str(s.state)) for s in boxes]
            recs += [Record(c.labels.get(POD_UID_LABEL, ""), c.id, str(c.state)) for c in ctrs]
            pleg.relist(recs)

        cgroup_root = parent if real else "/nonexistent"
        eviction = EvictionLoop(EvictionManager(parse_thresholds()), REAL_CLOCK, str(tmp), lambda: pods,
                                lambda p: f"{cgroup_root}/pod{p['metadata']['uid']}", lambda p, s: None,
                                Recorder(), cri=cri, log_dir_of=lambda p: tmp / "logs" / p["metadata"]["uid"],
                                volumes_dir_of=lambda p: tmp / "pods" / p["metadata"]["uid"] / "volumes")
        containers = ContainerGC(cri, ContainerGCPolicy(), REAL_CLOCK, lambda: pods)
        images = ImageGC(cri, ImageGCPolicy(), REAL_CLOCK)
        cpu = CPUManager("static", tmp, Topology.flat(2), reserved={0})
        cpu.start()
        reconciler = CPUReconciler(cpu, cri, REAL_CLOCK, lambda: pods)
        known = {p["metadata"]["uid"]: p for p in pods}
        metrics = ResourceCollector(cri, lambda: known)

        async def on() -> None:
            await relist()
            await eviction.pass_once()
            await containers.collect()
            await images.garbage_collect()
            await reconciler.reconcile()
            render(families(await metrics.collect()))

        parts: dict[str, Callable[[], Awaitable[Any]]] = {
            "eviction pass": eviction.pass_once, "container GC": containers.collect,
            "image GC": images.garbage_collect, "CPU manager reconcile": reconciler.reconcile,
            "/metrics/resource render": lambda: _render(metrics)}
        results: dict[str, tuple[list[float], list[float], list[float]]] = {}
        steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("off: PLEG relist only", relist), ("on: relist + eviction, GC, CPU, metrics", on),
            *parts.items()]
        for name, fn in steps:
            await fn()  # warm-up (the CPU manager's first reconcile writes every container's cpuset)
            cpu_s, wall_s, rt_s = [], [], []
            for _ in range(args.passes):
                r0 = task_cpu_s(runtime_pid) if runtime_pid else 0.0
                c0, w0 = time.process_time(), time.perf_counter()
                await fn()
                cpu_s.append(time.process_time() - c0)
                wall_s.append(time.perf_counter() - w0)
                rt_s.append(task_cpu_s(runtime_pid) - r0 if runtime_pid else 0.0)
            results[name] = (cpu_s, wall_s, rt_s)
    kind = ("nodeagent's real runtime, real pods" if real else "fake CRI runtime over gRPC")
    print(f"kubelet housekeeping at {args.pods} pods ({kind}; {args.limited} pods with "
          f"an ephemeral-storage limit), {args.passes} passes, load average {os.getloadavg()[0]:.2f}")
    rt_head = f" {'runtime CPU p50':>16} {'runtime CPU p99':>16}" if real else ""
    print(f"{'pass':44} {'CPU p50 ms':>11} {'CPU p99 ms':>11} {'wall p50 ms':>12} {'wall p99 ms':>12}"
          + rt_head)
    for name, (cpu_s, wall_s, rt_s) in results.items():
        rt = f" {pct(rt_s, .5) * 1e3:16.2f} {pct(rt_s, .99) * 1e3:16.2f}" if real else ""
        print(f"{name:44} {pct(cpu_s, .5) * 1e3:11.2f} {pct(cpu_s, .99) * 1e3:11.2f} "
              f"{pct(wall_s, .5) * 1e3:12.2f} {pct(wall_s, .99) * 1e3:12.2f}{rt}")
    off, on_ = results["off: PLEG relist only"][0], results["on: relist + eviction, GC, CPU, metrics"][0]
    off_rt = results["off: PLEG relist only"][2]
    print(f"added by the node-pressure work: {(pct(on_, .5) - pct(off, .5)) * 1e3:.2f} ms CPU per pass (p50)")
    if real:
        on_rt = results["on: relist + eviction, GC, CPU, metrics"][2]
        print(f"and in the runtime: {(pct(on_rt, .5) - pct(off_rt, .5)) * 1e3:.2f} ms CPU per pass (p50)")
    periods = {"eviction pass": 10, "container GC": 60, "image GC": 300, "CPU manager reconcile": 10,
               "/metrics/resource render": 15}  # kubelet's periods; a scrape per metrics-server resolution
    per_s = sum((pct(results[k][0], .5) + pct(results[k][2], .5)) / v for k, v in periods.items())
    print(f"at kubelet's periods ({', '.join(f'{k} every {v} s' for k, v in periods.items())}): "
          f"{per_s * 1e3:.2f} ms CPU per second = {per_s * 100:.2f} % of a core "
          f"(the PLEG relist, every 1 s: {(pct(off, .5) + pct(off_rt, .5)) * 100:.2f} %)"
          + (" (kubelet + runtime)" if real else ""))
    if args.plot:
        plot_cdf(args.plot, {k: cpu for k, (cpu, _, _) in results.items()},
                 f"kubelet housekeeping CPU per pass, {args.pods} pods", "ms CPU")
        print(f"plot: {args.plot}")


async def _render(metrics: ResourceCollector) -> None:
    render(families(await metrics.collect()))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=110)
    ap.add_argument("--passes", type=int, default=50)
    ap.add_argument("--limited", type=int, default=10)
    ap.add_argument("--runtime", choices=("fake", "real"), default="fake",
                    help="the in-process fake CRI runtime, or nodeagent's real one with real pods (root)")
    add_plot_argument(ap)
    asyncio.run(main(ap.parse_args()))

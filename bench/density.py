"""Density, kubemark-style: the real `nodeagent server` with hollow nodes and pods made by Deployments.

Starts `nodeagent server` (apiserver, scheduler, controllers; SQLite or a private etcd as the store),
registers N hollow nodes (`nodeagent/testing/hollow.py`: each a Node of 110 pods with its own
`system:node:<name>` identity, its Lease, and pods reported Running the moment they are bound), then
creates Deployments in one namespace at a steady pod rate until N x pods-per-node pods exist, and
measures what Kubernetes' scalability SLOs measure:

- pod startup latency: the pod first seen by a watch -> seen Running by the same watch (SLO: p99 <= 5 s);
- API call latency per verb and resource, p99, from the server's own apiserver_request_duration_seconds
  histogram (interpolated in its buckets, as Prometheus' histogram_quantile) beside the exact client-side
  p99 of the bench's and hollow kubelets' calls (SLO: mutating <= 1 s, get <= 1 s, list <= 30 s);
- watch event latency: a hollow kubelet's status write sent -> the Running event seen by the watch;
- the server's CPU (seconds per pod and cores while pods are created) and peak RSS, and etcd's beside.

`--kill-apiserver SECONDS` kills the server with SIGKILL that far into the run and starts it again on
the same store and port (its scheduler and controllers with it); a ConfigMap writer runs alongside, and
the end checks that no acknowledged write is lost (each Deployment and ConfigMap the server answered
201 exists; every pod is Running) and that the watch (an informer: resumed from its last
resourceVersion, relisted on 410) holds what a final list holds.

    .venv/bin/python bench/density.py --stores sqlite,etcd --nodes 100 --pods-per-node 30 --rate 20
    .venv/bin/python bench/density.py --stores etcd --nodes 20 --pods-per-node 10 --kill-apiserver 10
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client.parser import text_string_to_metric_families

from bench.apiserver import cpu_seconds
from bench.report import CdfPanel, add_plot_argument, pct, plot_cdf_panels
from nodeagent.apiserver.auth import issue_node_token
from nodeagent.apiserver.request import parse
from nodeagent.client.rest import Client, ClientError
from nodeagent.testing.apiserver import ServerProcess, start_server
from nodeagent.testing.etcd import EtcdServer
from nodeagent.testing.etcd import available as etcd_available
from nodeagent.testing.hollow import HollowNodes

NS = "density"
STARTUP_SLO = 5.0  # pod startup latency p99, seconds (Kubernetes' scalability SLO)
MUTATING = {"create", "update", "patch", "delete", "deletecollection"}
SLO = {"mutating": 1.0, "get": 1.0, "list": 30.0}  # API call latency p99, seconds
ROWS = 6  # API latency rows shown per SLO class, slowest first
CLUSTER_CIDR = "172.16.0.0/12"  # room for 4,096 nodes' /24 podCIDRs (only written into statuses)


class TimedClient(Client):
    """A client that records each call's wall time by (verb, resource): the client side of the SLO."""

    samples: dict[tuple[str, str], list[float]] = collections.defaultdict(list)

    async def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
                      content_type: str = "application/json", deadline: float = 60,
                      accept: str | None = None) -> Any:
        t0 = time.monotonic()
        try:
            return await super().request(method, path, body, params, content_type, deadline, accept)
        finally:
            try:
                info = parse(method, path, {})
            except Exception:  # a path the server would refuse: not an API call to time
                info = None
            if info is not None:
                sub = f"/{info.subresource}" if info.subresource else ""
                self.samples[(info.verb, info.resource.name + sub)].append(time.monotonic() - t0)


def deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name, "group": "density"}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                                                           "resources": {"requests": {"cpu": "1m",
                                                                                      "memory": "1Mi"}}}]}}}}


async def until_acked(call: Any, what: str, limit: float = 120) -> bool:
    """A write retried through connection errors, 429 and 5xx (an apiserver restarting) until answered;
    True when the server acknowledged it (AlreadyExists after a retry: an earlier try landed)."""
    deadline = time.monotonic() + limit
    tried = False
    while True:
        try:
            await call()
            return True
        except ClientError as e:
            if e.already_exists and tried:
                return True
            if e.code not in (0, 429, 500, 503, 504) or time.monotonic() > deadline:
                print(f"  {what}: not written ({e.code} {e.reason}: {e})", file=sys.stderr)
                return False
        tried = True
        await asyncio.sleep(0.5)


class PodInformer:
    """One list+watch of the namespace's pods, as an informer: resumes from its last resourceVersion
    when the stream breaks, relists on 410 Gone; records when each pod was first seen and seen Running."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.view: dict[str, str] = {}  # name -> resourceVersion last seen
        self.first_seen: dict[str, float] = {}
        self.running_at: dict[str, float] = {}
        self.relists = 0
        self.resumes = 0
        self.changed = asyncio.Event()

    def _see(self, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        self.view[name] = obj["metadata"]["resourceVersion"]
        self.first_seen.setdefault(name, now)
        if (obj.get("status") or {}).get("phase") == "Running":
            self.running_at.setdefault(name, now)
        self.changed.set()

    async def _relist(self) -> str:
        listed = await self.client.list("pods", NS)
        now = time.monotonic()
        self.view = {}
        for p in listed["items"]:
            self._see(p, now)
        return listed["metadata"]["resourceVersion"]

    async def run(self) -> None:
        rv = ""
        while True:
            try:
                if not rv:
                    rv = await self._relist()
                    self.relists += 1
                async for ev in self.client.watch("pods", NS, resource_version=rv, timeout_seconds=120):
                    obj = ev["object"]
                    rv = obj["metadata"].get("resourceVersion") or rv
                    if ev["type"] == "BOOKMARK":
                        continue
                    if ev["type"] == "DELETED":
                        self.view.pop(obj["metadata"]["name"], None)
                        continue
                    self._see(obj, time.monotonic())
                self.resumes += 1
            except ClientError as e:
                if e.gone:
                    rv = ""  # too old to resume from: list again, as a reflector does
                else:
                    self.resumes += 1
                    await asyncio.sleep(0.3)


class Usage:
    """The server's (and etcd's) CPU and peak RSS, sampled once a second from /proc."""

    def __init__(self) -> None:
        self.pids: dict[str, int] = {}
        self.cpu: dict[str, float] = collections.defaultdict(float)  # seconds, over processes that ended
        self._last: dict[str, float] = {}
        self.peak_rss: dict[str, int] = collections.defaultdict(int)

    def watch(self, name: str, pid: int) -> None:
        self._sample()
        self.pids[name] = pid
        self._last[name] = 0.0

    def _sample(self) -> None:
        for name, pid in self.pids.items():
            with contextlib.suppress(OSError):
                c = cpu_seconds(pid)
                self.cpu[name] += c - self._last[name]
                self._last[name] = c
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak_rss[name] = max(self.peak_rss[name], int(line.split()[1]) * 1024)

    def snapshot(self) -> dict[str, float]:
        self._sample()
        return dict(self.cpu)

    async def run(self) -> None:
        while True:
            self._sample()
            await asyncio.sleep(1.0)


def histogram_p99(metrics_text: str) -> dict[tuple[str, str], tuple[float, int]]:
    """p99 and count of apiserver_request_duration_seconds per (verb, resource[/subresource]), from the
    cumulative buckets with linear interpolation, as Prometheus' histogram_quantile computes it."""
    buckets: dict[tuple[str, str], list[tuple[float, float]]] = collections.defaultdict(list)
    for fam in text_string_to_metric_families(metrics_text):
        if fam.name != "apiserver_request_duration_seconds":
            continue
        for s in fam.samples:
            if not s.name.endswith("_bucket"):
                continue
            sub = s.labels.get("subresource", "")
            key = (s.labels["verb"], s.labels["resource"] + (f"/{sub}" if sub else ""))
            buckets[key].append((float(s.labels["le"]), s.value))
    out = {}
    for key, bs in buckets.items():
        merged: dict[float, float] = collections.defaultdict(float)
        for le, v in bs:
            merged[le] += v  # the same (verb, resource) in several groups or scopes
        pts = sorted(merged.items())
        total = pts[-1][1]
        if not total:
            continue
        rank, prev_le, prev_v = 0.99 * total, 0.0, 0.0
        q = pts[-2][0] if len(pts) > 1 else 0.0  # past the last finite bucket: its bound, as Prometheus
        for le, v in pts:
            if v >= rank:
                q = pts[-2][0] if le == float("inf") else prev_le + (le - prev_le) * (rank - prev_v) / (
                    (v - prev_v) or 1)
                break
            prev_le, prev_v = le, v
        out[key] = (q, int(total))
    return out


def slo_for(verb: str) -> tuple[str, float] | None:
    if verb in MUTATING:
        return "mutating", SLO["mutating"]
    if verb in ("get", "list"):
        return verb, SLO[verb]
    return None  # watch and connect are long-running: no latency SLO


@dataclasses.dataclass
class Result:
    store: str
    startup: list[float]
    watch: list[float]
    created_in: float
    all_running_in: float
    server_cpu: float
    etcd_cpu: float
    server_rss: int
    etcd_rss: int
    server_api: dict[tuple[str, str], tuple[float, int]]
    client_api: dict[tuple[str, str], list[float]]
    pods: int
    checks: list[str] = dataclasses.field(default_factory=list)
    failures: list[str] = dataclasses.field(default_factory=list)


def restart(srv: ServerProcess, datastore: str, extra: list[str]) -> ServerProcess:
    """kill -9, then the same server again: same data dir, store and port."""
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait()
    return start_server(srv.data_dir, datastore=datastore, port=srv.port, extra=extra, timeout=120)


async def run_store(store: str, args: argparse.Namespace) -> Result:
    total = args.nodes * args.pods_per_node
    size = min(args.deployment_size, total)
    n_deploy = -(-total // size)
    TimedClient.samples.clear()
    with tempfile.TemporaryDirectory(prefix="bench-density-") as tmp, contextlib.ExitStack() as stack:
        datastore = "sqlite"
        etcd: EtcdServer | None = None
        if store == "etcd":
            etcd = stack.enter_context(EtcdServer())
            datastore = f"etcd://{etcd.endpoint}"
        extra = ["--cluster-cidr", CLUSTER_CIDR, *args.server_arg]
        srv = start_server(Path(tmp) / "server", datastore=datastore, extra=extra, timeout=120)
        stack.callback(lambda: srv.stop())
        usage = Usage()
        usage.watch("server", srv.proc.pid)
        if etcd is not None and etcd.proc is not None:
            usage.watch("etcd", etcd.proc.pid)
        admin = TimedClient.from_kubeconfig(srv.kubeconfig, max_connections=64)
        names = [f"hollow-{i:04d}" for i in range(args.nodes)]
        node_clients = {n: TimedClient(srv.url, issue_node_token(srv.data_dir, n), ca_file=str(srv.ca_file),
                                       max_connections=4) for n in names}
        hollow = HollowNodes(admin, names, heartbeat=10.0, node_client=node_clients.__getitem__)
        sent: dict[str, float] = {}

        def written(what: str, pod: dict[str, Any]) -> None:
            if what == "status":
                sent.setdefault(pod["metadata"]["name"], time.monotonic())

        hollow.on_written = written
        informer = PodInformer(admin)
        acked: dict[str, set[str]] = {"deployments": set(), "configmaps": set()}
        result = Result(store, [], [], 0.0, 0.0, 0.0, 0.0, 0, 0, {}, {}, total)
        try:
            await hollow.register()
            await admin.create("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": NS}})
            async with asyncio.TaskGroup() as tg:
                bg = [tg.create_task(hollow.run()), tg.create_task(informer.run()),
                      tg.create_task(usage.run())]
                await asyncio.sleep(1.0)
                cpu0 = usage.snapshot()
                t0 = time.monotonic()

                async def create(i: int) -> None:
                    name = f"d-{i:04d}"
                    replicas = min(size, total - i * size)
                    if await until_acked(lambda: admin.create("deployments", deployment(name, replicas), NS),
                                         f"deployment {name}"):
                        acked["deployments"].add(name)

                async def configmaps() -> None:
                    """--kill-apiserver: acknowledged writes to check for afterwards, five a second."""
                    i = 0
                    while True:
                        name = f"cm-{i:05d}"
                        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                                "data": {"i": str(i)}}

                        async def write(body: dict[str, Any] = body) -> None:
                            await admin.create("configmaps", body, NS)

                        if await until_acked(write, f"configmap {name}"):
                            acked["configmaps"].add(name)
                        i += 1
                        await asyncio.sleep(0.2)

                async def kill(at: float) -> None:
                    nonlocal srv
                    await asyncio.sleep(at)
                    killed = time.monotonic() - t0
                    srv = await asyncio.to_thread(restart, srv, datastore, extra)
                    usage.watch("server", srv.proc.pid)
                    result.checks.append(f"server killed (SIGKILL) at {killed:.1f} s, serving again "
                                         f"{time.monotonic() - t0 - killed:.1f} s later (its request "
                                         "metrics start again there)")

                if args.kill_apiserver is not None:
                    bg.append(tg.create_task(configmaps()))
                    bg.append(tg.create_task(kill(args.kill_apiserver)))
                creators = []
                for i in range(n_deploy):
                    await asyncio.sleep(max(0.0, t0 + i * size / args.rate - time.monotonic()))
                    creators.append(tg.create_task(create(i)))
                await asyncio.gather(*creators)
                deadline = time.monotonic() + args.timeout
                while len(informer.running_at) < total and time.monotonic() < deadline:
                    if len(informer.first_seen) >= total and not result.created_in:
                        result.created_in = time.monotonic() - t0
                    informer.changed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(informer.changed.wait(), 1.0)
                result.all_running_in = time.monotonic() - t0
                result.created_in = result.created_in or result.all_running_in
                cpu1 = usage.snapshot()
                result.server_cpu = cpu1.get("server", 0.0) - cpu0.get("server", 0.0)
                result.etcd_cpu = cpu1.get("etcd", 0.0) - cpu0.get("etcd", 0.0)
                if len(informer.running_at) < total:
                    result.failures.append(f"only {len(informer.running_at)} of {total} pods seen Running "
                                           f"after {args.timeout:.0f} s")
                await check(admin, informer, acked, result, args)
                for t in bg:
                    t.cancel()
            result.startup = [informer.running_at[n] - informer.first_seen[n] for n in informer.running_at]
            result.watch = [informer.running_at[n] - sent[n] for n in informer.running_at if n in sent]
            result.server_rss = usage.peak_rss["server"]
            result.etcd_rss = usage.peak_rss.get("etcd", 0)
            result.server_api = histogram_p99(await admin.request("GET", "/metrics"))
            result.client_api = dict(TimedClient.samples)
            result.checks.append(f"informer: {informer.relists} list(s), {informer.resumes} watch restart(s)")
        finally:
            await admin.close()
            for c in node_clients.values():
                await c.close()
            if result.failures:  # the server's log outlives its temporary directory: what went wrong
                kept = Path(tempfile.gettempdir()) / f"density-{store}-server.log"
                with contextlib.suppress(OSError):
                    shutil.copyfile(srv.data_dir / "server.log", kept)
                    result.failures.append(f"the server's log: {kept}")
    return result


async def check(admin: Client, informer: PodInformer, acked: dict[str, set[str]], result: Result,
                args: argparse.Namespace) -> None:
    """No acknowledged write lost; the informer's view equals a final list (given a moment to catch up)."""
    for resource, names in acked.items():
        if not names:
            continue
        listed = await admin.list(resource, NS)
        have = {o["metadata"]["name"] for o in listed["items"]}
        lost = names - have
        if lost:
            result.failures.append(f"{len(lost)} acknowledged {resource} lost: {sorted(lost)[:5]}")
        else:
            result.checks.append(f"all {len(names)} acknowledged {resource} present")
    final: dict[str, str] = {}
    for _ in range(20):
        listed = await admin.list("pods", NS)
        final = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in listed["items"]}
        if informer.view == final:
            break
        await asyncio.sleep(0.5)
    if informer.view != final:
        missing = set(final) - set(informer.view)
        extra = set(informer.view) - set(final)
        stale = [n for n in final if n in informer.view and informer.view[n] != final[n]]
        result.failures.append(f"informer differs from a list: {len(missing)} missing, {len(extra)} extra, "
                               f"{len(stale)} stale")
    else:
        result.checks.append(f"informer view = final list ({len(final)} pods, same resourceVersions)")
    not_running = [p["metadata"]["name"] for p in (await admin.list("pods", NS))["items"]
                   if (p.get("status") or {}).get("phase") != "Running"]
    if not_running:
        result.failures.append(f"{len(not_running)} pods not Running in the final list: {not_running[:5]}")


def ms(seconds: float) -> str:
    return "—" if seconds != seconds else f"{seconds * 1000:.0f} ms"


def report(r: Result, args: argparse.Namespace) -> None:
    print(f"\n== {r.store}: {args.nodes} hollow nodes x {args.pods_per_node} pods = {r.pods} pods, "
          f"Deployments of {args.deployment_size} at {args.rate:g} pods/s ==")
    print(f"all pods created (seen by watch) in {r.created_in:.1f} s, "
          f"all Running in {r.all_running_in:.1f} s "
          f"(offered: {r.pods / args.rate:.1f} s at {args.rate:g} pods/s)")
    ok = pct(r.startup, 0.99) <= STARTUP_SLO
    print(f"pod startup latency (seen -> seen Running), n={len(r.startup)}: p50 {pct(r.startup, 0.5):.2f} s, "
          f"p90 {pct(r.startup, 0.9):.2f} s, p99 {pct(r.startup, 0.99):.2f} s   "
          f"[SLO p99 <= {STARTUP_SLO:g} s: {'met' if ok else 'MISSED'}]")
    print(f"watch event latency (status write sent -> event seen), n={len(r.watch)}: "
          f"p50 {pct(r.watch, 0.5) * 1000:.0f} ms, p99 {pct(r.watch, 0.99) * 1000:.0f} ms")
    cores = r.server_cpu / max(r.all_running_in, 1e-9)
    print(f"server CPU while creating: {r.server_cpu:.1f} s ({cores:.2f} cores, "
          f"{r.server_cpu / max(r.pods, 1) * 1000:.1f} ms/pod); peak RSS {r.server_rss / 2**20:.0f} MiB")
    if r.etcd_rss:
        print(f"etcd CPU: {r.etcd_cpu:.1f} s ({r.etcd_cpu / max(r.pods, 1) * 1000:.1f} ms/pod); "
              f"peak RSS {r.etcd_rss / 2**20:.0f} MiB")
    print(f"\nAPI call latency p99 (server: apiserver_request_duration_seconds; client: the bench's and "
          f"hollow kubelets' calls); the {ROWS} slowest of each SLO class\n"
          f"{'verb':<8} {'resource':<28} {'n':>7} {'server p99':>11} {'client p99':>11}  SLO")
    rows: dict[str, list[tuple[float, str]]] = collections.defaultdict(list)
    for verb, res in sorted(set(r.server_api) | set(r.client_api)):
        slo = slo_for(verb)
        if slo is None:
            continue
        srv_q, srv_n = r.server_api.get((verb, res), (float("nan"), 0))
        cli = r.client_api.get((verb, res), [])
        worst = max([x for x in (srv_q, pct(cli, 0.99)) if x == x] or [0.0])
        verdict = "met" if worst <= slo[1] else "MISSED"
        rows[slo[0]].append((worst, f"{verb:<8} {res:<28} {max(srv_n, len(cli)):>7} {ms(srv_q):>11} "
                                    f"{ms(pct(cli, 0.99)):>11}  {slo[0]} <= {slo[1]:g} s: {verdict}"))
    for cls, lines in rows.items():
        lines.sort(reverse=True)
        for _, line in lines[:ROWS]:
            print(line)
        if len(lines) > ROWS:
            print(f"{'':<8} ... {len(lines) - ROWS} more {cls} (verb, resource) pairs, each p99 <= "
                  f"{lines[ROWS][0] * 1000:.0f} ms")
    for c in r.checks:
        print(f"check: {c}")
    for f in r.failures:
        print(f"FAILED: {f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stores", default="sqlite,etcd", help="comma-separated: sqlite, etcd (default: both)")
    p.add_argument("--nodes", type=int, default=100, help="hollow nodes (default: %(default)s)")
    p.add_argument("--pods-per-node", type=int, default=30, help="pods per node (default: %(default)s)")
    p.add_argument("--rate", type=float, default=20.0,
                   help="pods/s created, cluster-wide (default: %(default)s)")
    p.add_argument("--deployment-size", type=int, default=10,
                   help="replicas per Deployment; Deployments are created rate/size a second (default: "
                        "%(default)s)")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds to wait for every pod Running after the last create (default: %(default)s)")
    p.add_argument("--kill-apiserver", type=float, default=None, metavar="SECONDS",
                   help="kill -9 the server this far into the run, start it again, and check nothing "
                        "acknowledged was lost and the watch missed nothing")
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="an extra argument for `nodeagent server` (repeat)")
    add_plot_argument(p)
    args = p.parse_args(argv)
    stores = [s for s in args.stores.split(",") if s]
    if bad := [s for s in stores if s not in ("sqlite", "etcd")]:
        p.error(f"--stores: unknown {bad} (sqlite, etcd)")
    if "etcd" in stores and (why := etcd_available()):
        p.error(f"--stores etcd: {why}")
    if min(args.nodes, args.pods_per_node, args.deployment_size) < 1 or args.rate <= 0:
        p.error("--nodes, --pods-per-node, --deployment-size and --rate must be positive")
    if args.pods_per_node > 110:
        p.error("--pods-per-node: a hollow node holds 110 pods (kubelet's --max-pods)")
    results = [asyncio.run(run_store(s, args)) for s in stores]
    for r in results:
        report(r, args)
    if args.plot:
        plot_cdf_panels(args.plot, [
            CdfPanel(f"pod startup latency, {args.nodes} hollow nodes x {args.pods_per_node} pods "
                     f"(SLO p99 {STARTUP_SLO:g} s)", {r.store: r.startup for r in results}, "s", 1.0),
            CdfPanel("watch event latency (status write sent -> event seen)",
                     {r.store: r.watch for r in results}, "ms")])
        print(f"plot: {args.plot}")
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

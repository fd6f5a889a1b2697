"""Workload controller throughput beside the ReplicaSet controller, measured in the same run.

Starts a real `nodeagent server` (its controllers run inside it) and N hollow
nodes that bind pending pods by fit and mark them Running/Ready. Times, from
creation until the object's status says so: a DaemonSet on every node, a
StatefulSet with Parallel pod management, one with OrderedReady (sequential by
design), a Job running N pods at once, and as the reference a ReplicaSet of N.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import add_plot_argument, plot_bars
from nodeagent.client.rest import Client
from nodeagent.testing.apiserver import start_server
from nodeagent.testing.hollow import HollowNodes


def tmpl(app: str, **spec) -> dict:
    return {"metadata": {"labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "bench:1"}], **spec}}


async def timed(client: Client, resource: str, body: dict, done) -> float:
    t0 = time.monotonic()
    await client.create(resource, body, "default")
    while True:
        obj = await client.get(resource, body["metadata"]["name"], "default")
        if done(obj.get("status") or {}):
            return time.monotonic() - t0
        if time.monotonic() - t0 > 600:
            raise TimeoutError(resource)
        await asyncio.sleep(0.1)


async def run(args: argparse.Namespace) -> None:
    n, ordered = args.replicas, args.ordered
    with tempfile.TemporaryDirectory(prefix="bench-wl-") as tmp:
        srv = start_server(Path(tmp), extra=["--node-monitor-grace-period", "600"])
        client = Client.from_kubeconfig(srv.kubeconfig)
        nodes = HollowNodes(client, [f"hollow-{i}" for i in range(args.nodes)], bind=True, heartbeat=30)
        try:
            await nodes.register()
            async with asyncio.TaskGroup() as tg:
                hollow = tg.create_task(nodes.run())
                sel = {"matchLabels": {"app": "rs"}}
                results = {}
                results[f"ReplicaSet {n} replicas ready (reference)"] = await timed(
                    client, "replicasets", {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                            "metadata": {"name": "rs"},
                                            "spec": {"replicas": n, "selector": sel, "template": tmpl("rs")}},
                    lambda s: s.get("readyReplicas") == n)
                results[f"DaemonSet on {args.nodes} nodes ready"] = await timed(
                    client, "daemonsets", {"apiVersion": "apps/v1", "kind": "DaemonSet",
                                           "metadata": {"name": "ds"},
                                           "spec": {"selector": {"matchLabels": {"app": "ds"}},
                                                    "template": tmpl("ds")}},
                    lambda s: s.get("numberReady") == args.nodes)
                results[f"StatefulSet Parallel {n} replicas ready"] = await timed(
                    client, "statefulsets", {"apiVersion": "apps/v1", "kind": "StatefulSet",
                                             "metadata": {"name": "par"},
                                             "spec": {"replicas": n, "podManagementPolicy": "Parallel",
                                                      "serviceName": "par",
                                                      "selector": {"matchLabels": {"app": "par"}},
                                                      "template": tmpl("par")}},
                    lambda s: s.get("readyReplicas") == n)
                results[f"StatefulSet OrderedReady {ordered} replicas ready"] = await timed(
                    client, "statefulsets", {"apiVersion": "apps/v1", "kind": "StatefulSet",
                                             "metadata": {"name": "ord"},
                                             "spec": {"replicas": ordered, "serviceName": "ord",
                                                      "selector": {"matchLabels": {"app": "ord"}},
                                                      "template": tmpl("ord")}},
                    lambda s: s.get("readyReplicas") == ordered)
                results[f"Job {n} pods active at once"] = await timed(
                    client, "jobs", {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "job"},
                                     "spec": {"parallelism": n, "completions": n,
                                              "template": tmpl("job", restartPolicy="Never")}},
                    lambda s: s.get("active") == n)
                hollow.cancel()
            print(f"workload controllers, {args.nodes} hollow nodes, shared 2-core machine "
                  "(other jobs running):")
            rates: dict[str, dict[str, float]] = {}
            for k, v in results.items():
                pods = args.nodes if k.startswith("DaemonSet") else ordered if "Ordered" in k else n
                print(f"  {k:<48} {v:7.2f} s   ({pods / v:7.1f} pods/s)")
                rates[k] = {"pods/s": pods / v}
            if args.plot:
                plot_bars(args.plot, rates, f"workload controllers, {args.nodes} hollow nodes", "pods/s")
                print(f"plot: {args.plot}")
        finally:
            await client.close()
            srv.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=50, help="hollow nodes (default: %(default)s)")
    p.add_argument("--replicas", type=int, default=200, help="pods per workload (default: %(default)s)")
    p.add_argument("--ordered", type=int, default=20,
                   help="OrderedReady StatefulSet replicas (default: %(default)s)")
    add_plot_argument(p)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()

"""Controller throughput: a Deployment scaled 0 → N, then a rolling update of N replicas.

Runs a real `nodeagent server` (apiserver, scheduler, controllers) and hollow
nodes that register Node objects and mark pods Running/Ready, as kubemark's
hollow kubelets do; the server's scheduler binds (or, with `--bind hollow`, the
hollow nodes bind round-robin and the server runs without its scheduler). Prints the time until
all N pods exist and are bound, and until the rolling update (maxSurge 25%) has completed.
Target (issue 9): 1,000 pods created and bound in under 10 s on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import add_plot_argument, plot_lines
from nodeagent.client.rest import Client
from nodeagent.testing.apiserver import start_server
from nodeagent.testing.hollow import HollowNodes


def deployment(n: int, image: str) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "bench", "namespace": "default"},
            "spec": {"replicas": n, "selector": {"matchLabels": {"app": "bench"}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%",
                                                                             "maxUnavailable": "25%"}},
                     "template": {"metadata": {"labels": {"app": "bench"}},
                                  "spec": {"containers": [{"name": "c", "image": image}]}}}}


async def wait_for(check, interval: float = 0.2, limit: float = 600) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if await check():
            return time.monotonic() - t0
        await asyncio.sleep(interval)
    raise TimeoutError("not reached")


def plot(args: argparse.Namespace, t0: float, progress: list[tuple[float, int, int]]) -> None:
    """--plot: pods created (and bound, with nodes) against seconds since the scale to N."""
    if not args.plot:
        return
    series = {"pods created": [(0.0, 0)] + [(t - t0, c) for t, c, _ in progress]}
    if args.nodes:
        series["pods created and bound"] = [(0.0, 0)] + [(t - t0, b) for t, _, b in progress]
    plot_lines(args.plot, series, f"Deployment scaled 0 -> {args.replicas} ({args.nodes} hollow nodes, "
               f"binder: {args.bind})", "s since the scale", "pods")
    print(f"plot: {args.plot}")


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-ctl-") as tmp:
        # With --bind hollow the server must not run its own scheduler (two binders would race).
        srv = start_server(Path(tmp), datastore=args.datastore,
                           extra=["--without", "scheduler"] if args.bind == "hollow" else [])
        client = Client.from_kubeconfig(srv.kubeconfig, max_connections=64)
        names = [f"hollow-{i}" for i in range(args.nodes)]
        # Phase 1 measures create + bind only (kubelets do not report in that window);
        # phase 2 needs Ready pods, so a second set of hollow kubelets reports status then.
        nodes = HollowNodes(client, names, bind=args.bind == "hollow", ready=False)
        try:
            await nodes.register()
            async with asyncio.TaskGroup() as tg:
                hollow = tg.create_task(nodes.run()) if args.nodes else None

                seen: dict[str, str] = {}
                marks: dict[str, float] = {}
                bound_names: set[str] = set()
                progress: list[tuple[float, int, int]] = []  # (monotonic time, pods seen, pods bound)
                done = asyncio.Event()

                async def track() -> None:
                    # One watch, no polling: the benchmark must not load the server it measures.
                    listed = await client.list("pods", "default", label_selector="app=bench")
                    async for ev in client.watch("pods", "default", listed["metadata"]["resourceVersion"],
                                                 label_selector="app=bench", timeout_seconds=600):
                        meta = ev["object"]["metadata"]
                        if ev["type"] == "BOOKMARK":
                            continue
                        if ev["type"] == "DELETED":
                            seen.pop(meta["name"], None)
                            bound_names.discard(meta["name"])
                            continue
                        seen[meta["name"]] = ev["object"]["spec"].get("nodeName") or ""
                        if seen[meta["name"]]:
                            bound_names.add(meta["name"])
                        progress.append((time.monotonic(), len(seen), len(bound_names)))
                        if len(seen) >= args.replicas and "created" not in marks:
                            marks["created"] = time.monotonic()
                        if len(seen) >= args.replicas and not args.nodes:
                            done.set()
                        if len(seen) >= args.replicas and all(seen.values()) and "bound" not in marks:
                            marks["bound"] = time.monotonic()
                            done.set()

                tracker = tg.create_task(track())
                await asyncio.sleep(0.5)
                await client.create("deployments", deployment(0, "app:v1"), "default")
                t0 = time.monotonic()
                await client.patch("deployments", "bench", {"spec": {"replicas": args.replicas}}, "default")
                await asyncio.wait_for(done.wait(), 600)
                tracker.cancel()
                created = marks["created"] - t0
                if not args.nodes:
                    print(f"scale 0 -> {args.replicas} with no nodes: all pods created in {created:.2f} s "
                          f"({args.replicas / created:.0f} pods/s)")
                    plot(args, t0, progress)
                    tracker.cancel()
                    return
                bound = marks["bound"] - t0
                print(f"scale 0 -> {args.replicas}: all pods created in {created:.2f} s "
                      f"({args.replicas / created:.0f} pods/s), created and bound in {bound:.2f} s "
                      f"[target: < 10 s for 1,000]")
                plot(args, t0, progress)

                if hollow:
                    hollow.cancel()
                nodes = HollowNodes(client, names, bind=args.bind == "hollow", ready=True)
                hollow = tg.create_task(nodes.run())

                async def rolled() -> bool:
                    d = await client.get("deployments", "bench", "default")
                    st = d.get("status") or {}
                    n = args.replicas
                    return (st.get("observedGeneration", 0) >= d["metadata"]["generation"]
                            and st.get("updatedReplicas") == n and st.get("replicas") == n
                            and st.get("availableReplicas") == n)

                await wait_for(rolled)
                t0 = time.monotonic()
                v2 = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "app:v2"}]}}}}
                await client.patch("deployments", "bench", v2, "default", patch_type="strategic")
                await wait_for(rolled)
                took = time.monotonic() - t0
                print(f"rolling update of {args.replicas} replicas (maxSurge 25%, maxUnavailable 25%): "
                      f"{took:.2f} s")
                if hollow:
                    hollow.cancel()
        finally:
            await client.close()
            srv.stop()
    print(f"(server datastore: {args.datastore}; {args.nodes} hollow nodes; binder: {args.bind})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", type=int, default=1000)
    p.add_argument("--nodes", type=int, default=50)
    p.add_argument("--datastore", default="memory", help="memory | sqlite | etcd://HOST:PORT")
    p.add_argument("--bind", choices=["hollow", "scheduler"], default="scheduler",
                   help="who binds pods: the hollow nodes, or the server's scheduler")
    add_plot_argument(p)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()

"""Storage-layer benchmark: the apiserver's backends side by side (memory as the reference, SQLite, etcd).

    .venv/bin/python bench/store.py [--backends memory,sqlite,sqlite-normal,etcd] [--writers 64] ...

Per backend: creates/s with concurrent writers (and with one, which pays a commit per write),
gets/s, updates/s, lists/s of 1k and 10k objects,
and watch delivery latency (p50/p99, from the start of the write to each of N watchers
receiving it). `sqlite` is the default (synchronous=FULL), `sqlite-normal` the same with
synchronous=NORMAL, `etcd` Debian's etcd started here on a tmp dir. The issue's targets
for the whole stack on 2 cores (HTTP included) are printed beside the figures: >= 1,000
creates/s and >= 5,000 gets/s with SQLite, watch p99 < 50 ms with 100 watchers.
Not root; the data lives in a tmp dir on the same disk as /tmp.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.report import add_plot_argument, pct, plot_bars
from nodeagent.store.base import Store
from nodeagent.store.etcd import EtcdStore
from nodeagent.store.memory import MemoryStore
from nodeagent.store.sqlite import SQLiteStore
from nodeagent.testing.etcd import EtcdServer, available

TARGETS = {"creates/s": ">=1000 (full stack)", "gets/s": ">=5000 (full stack)",
           "watch p99 ms": "<50 (full stack)"}


def pod(ns: str, name: str, stamp: float = 0.0) -> dict:
    """A pod about the size kubectl creates (~1.5 KB of JSON)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"{random.getrandbits(128):032x}",
            "labels": {"app": "bench", "tier": "web", "pod-template-hash": "5d4f8b7c9"},
            "annotations": {"bench/stamp": repr(stamp)},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "registry.local/httpd:2.4",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                  "limits": {"memory": "128Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
            ],
            "priority": 0,
            "enableServiceLinks": True,
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


async def run_concurrently(n: int, workers: int, op) -> float:
    """Run op(i) for i in range(n) with `workers` concurrent callers; the rate per second."""
    it = iter(range(n))

    async def worker():
        for i in it:
            await op(i)

    t = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return n / (time.perf_counter() - t)


async def timed_rate(seconds: float, op) -> float:
    n = 0
    t0 = time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds or n < 3:
        await op(n)
        n += 1
    return n / elapsed


async def bench_store(store: Store, args: argparse.Namespace) -> dict:
    out: dict = {}
    # creates: the 10k and 1k namespaces filled by concurrent writers
    big, small = args.objects
    out["creates/s"] = await run_concurrently(
        big + small,
        args.writers,
        lambda i: store.create(f"/pods/big/p{i:06d}", pod("big", f"p{i}"))
        if i < big
        else store.create(f"/pods/small/p{i:06d}", pod("small", f"p{i}")),
    )
    # one writer at a time: every create waits for its own commit (and fsync), no group commit
    out["creates/s 1 writer"] = await run_concurrently(
        args.gets // 20, 1, lambda i: store.create(f"/pods/serial/p{i:06d}", pod("serial", f"p{i}"))
    )
    keys = [f"/pods/big/p{i:06d}" for i in range(big)]
    out["gets/s"] = await run_concurrently(args.gets, args.writers, lambda i: store.get(random.choice(keys)))
    out["updates/s"] = await run_concurrently(
        args.gets // 5, args.writers,
        lambda i: store.update(f"/pods/small/p{big + i % small:06d}", pod("small", "u")),
    )
    out[f"lists/s {small // 1000}k"] = await timed_rate(args.seconds, lambda i: store.list("/pods/small/"))
    out[f"lists/s {big // 1000}k"] = await timed_rate(args.seconds, lambda i: store.list("/pods/big/"))
    out.update(await bench_watch(store, args))
    return out


async def bench_watch(store: Store, args: argparse.Namespace) -> dict:
    latencies: list[float] = []
    n_events = args.watch_events
    since = store.revision
    ready = 0

    async def watcher():
        nonlocal ready
        seen = 0
        it = store.watch("/pods/watch/", since).__aiter__()
        ready += 1
        async for ev in it:
            latencies.append(time.perf_counter() - float(ev.object["metadata"]["annotations"]["bench/stamp"]))
            seen += 1
            if seen == n_events:
                return

    tasks = [asyncio.create_task(watcher()) for _ in range(args.watchers)]
    await asyncio.sleep(0.2)
    interval = 1.0 / args.watch_rate

    async def writes():
        t0 = time.perf_counter()
        pending = []
        for i in range(n_events):  # a steady rate, each write stamped when it starts
            delay = t0 + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            create = store.create(f"/pods/watch/w{i:06d}", pod("watch", f"w{i}", time.perf_counter()))
            pending.append(asyncio.create_task(create))
        await asyncio.gather(*pending)

    await writes()
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    return {"watch p50 ms": pct(latencies, 0.5) * 1000, "watch p99 ms": pct(latencies, 0.99) * 1000,
            "watch deliveries": len(latencies)}


async def run_backend(name: str, args: argparse.Namespace, tmp: str) -> dict:
    etcd = None
    if name == "memory":
        store: Store = MemoryStore()
    elif name in ("sqlite", "sqlite-normal"):
        store = SQLiteStore(os.path.join(tmp, f"{name}.db"),
                            synchronous="NORMAL" if name.endswith("normal") else "FULL")
    elif name == "etcd":
        reason = available()
        if reason:
            return {"skipped": reason}
        etcd = EtcdServer(name="bench", data_dir=os.path.join(tmp, "etcd")).start()
        store = EtcdStore(etcd.endpoints)
    else:
        raise SystemExit(f"unknown backend {name}")
    await store.start()
    try:
        return await bench_store(store, args)
    finally:
        await store.close()
        if etcd is not None:
            etcd.stop()


def table(results: dict[str, dict]) -> str:
    names = list(results)
    rows = []
    for r in results.values():
        for k in r:
            if k not in rows:
                rows.append(k)
    width = max(len(r) for r in rows) + 2
    lines = ["".ljust(width) + "".join(n.rjust(15) for n in names) + "   target"]
    for row in rows:
        cells = []
        for n in names:
            v = results[n].get(row, "")
            cells.append((f"{v:,.1f}" if isinstance(v, float) else str(v)).rjust(15))
        lines.append(row.ljust(width) + "".join(cells) + "   " + TARGETS.get(row, ""))
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", default="memory,sqlite,sqlite-normal,etcd")
    p.add_argument("--writers", type=int, default=64, help="concurrent callers for creates/gets (default 64)")
    p.add_argument("--objects", default="10000,1000",
                   help="objects in the big and the small list (default 10000,1000)")
    p.add_argument("--gets", type=int, default=20000, help="gets to time (default 20000)")
    p.add_argument("--seconds", type=float, default=2.0, help="time per list measurement (default 2)")
    p.add_argument("--watchers", type=int, default=100)
    p.add_argument("--watch-events", type=int, default=500)
    p.add_argument("--watch-rate", type=float, default=200.0,
                   help="writes/s during the watch test (default 200)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON too")
    add_plot_argument(p)
    args = p.parse_args()
    args.objects = [int(x) for x in args.objects.split(",")]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        for name in args.backends.split(","):
            print(f"... {name}", file=sys.stderr, flush=True)
            results[name] = asyncio.run(run_backend(name, args, tmp))
    print(f"store backends, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (shared machine)")
    print(table(results))
    if args.json:
        print(json.dumps(results, indent=1))
    if args.plot:
        plot_bars(args.plot, {row: {n: r[row] for n, r in results.items() if row in r}
                              for row in dict.fromkeys(k for r in results.values() for k in r)
                              if row.endswith("/s") or "/s " in row},
                  "store backends: operations per second", "per second", logy=True)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

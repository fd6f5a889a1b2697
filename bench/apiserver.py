"""apiserver benchmark: pod creates/s, gets/s, lists/s (1k and 10k pods), watch delivery p50/p99 to N
watchers.

Each backend (memory, sqlite, etcd://...) gets its own `nodeagent server` process over HTTPS with keep-alive;
load comes from several client processes. Figures are printed side by side; the reference targets
(2 cores: >= 1,000 creates/s and >= 5,000 gets/s with SQLite, watch p99 < 50 ms with 100 watchers) are shown.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import re
import ssl
import sys
import tempfile
import time
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from bench import pyspy
from bench.report import add_plot_argument, pct, plot_bars
from nodeagent.testing.apiserver import start_server


def pod(name: str, **ann: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "bench"},
                                                           "annotations": ann},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"],
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}


def _session(url: str, token: str, ca: str, conns: int) -> aiohttp.ClientSession:
    ctx = ssl.create_default_context(cafile=ca)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
               "Accept": "application/json"}
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=conns), headers=headers)


async def _load(kind: str, url: str, token: str, ca: str, ns: str, worker: int, count: int, conc: int,
                names: list[str]) -> tuple[int, int]:
    ok = err = 0
    async with _session(url, token, ca, conc) as s:
        idx = iter(range(count))

        async def one() -> None:
            nonlocal ok, err
            for i in idx:
                if kind == "create":
                    body = json.dumps(pod(f"w{worker}-{i}-{time.monotonic_ns() % 100000}"))
                    r = await s.post(f"{url}/api/v1/namespaces/{ns}/pods", data=body)
                elif kind == "get":
                    r = await s.get(f"{url}/api/v1/namespaces/{ns}/pods/{names[i % len(names)]}")
                else:
                    r = await s.get(f"{url}/api/v1/namespaces/{ns}/pods")
                await r.read()
                if r.status < 300:
                    ok += 1
                else:
                    err += 1

        await asyncio.gather(*(one() for _ in range(conc)))
    return ok, err


def _worker(args: tuple) -> tuple[int, int]:
    return asyncio.run(_load(*args))


def cpu_seconds(pid: int) -> float:
    """utime + stime of the server process: what an op costs the server, whatever else loads the machine."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


CPU: dict[str, float] = {}
LOADER = "python"


def ab_rate(kind: str, srv, ns: str, total: int, conc: int, names: list[str] | None = None) -> float:
    """The same load from ApacheBench (C, keep-alive, one process): leaves the server a core of its own."""
    import shutil
    import subprocess

    url = f"{srv.url}/api/v1/namespaces/{ns}/pods"
    conc = min(conc, total)  # ab refuses a concurrency above its request count
    args = ["ab", "-q", "-k", "-c", str(conc), "-n", str(total), "-H", f"Authorization: Bearer {srv.token}",
            "-H", "Accept: application/json"]
    tmp = None
    if kind == "create":
        tmp = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        body = pod("x")
        del body["metadata"]["name"]
        body["metadata"]["generateName"] = "ab-"
        json.dump(body, tmp)
        tmp.close()
        args += ["-p", tmp.name, "-T", "application/json"]
    elif kind == "get":
        url += f"/{(names or ['p0'])[0]}"
    assert shutil.which("ab")
    c0 = cpu_seconds(srv.proc.pid)
    ran = subprocess.run([*args, url], capture_output=True, text=True, timeout=600)
    out = ran.stdout or ran.stderr  # ab's figures, or why it gave none
    if tmp:
        Path(tmp.name).unlink()
    done = int(_ab_figure(out, r"Complete requests:\s+(\d+)"))
    bad = re.search(r"Non-2xx responses:\s+(\d+)", out)
    failed = int(_ab_figure(out, r"Failed requests:\s+(\d+)"))
    # ab counts bodies of another length (generated names) as failed
    length = re.search(r"Length: (\d+)", out)
    failed -= int(length.group(1)) if length else 0
    if bad or failed:
        print(f"    ({bad.group(1) if bad else 0} non-2xx, {failed} failed {kind}s)")
    CPU[kind] = (cpu_seconds(srv.proc.pid) - c0) / max(done, 1)
    return float(_ab_figure(out, r"Requests per second:\s+([\d.]+)"))


def _ab_figure(out: str, pattern: str) -> str:
    m = re.search(pattern, out)
    if m is None:
        raise RuntimeError(f"ab printed no {pattern!r}: {out[:2000]}")  # its reason comes first
    return m.group(1)


def rate(kind: str, srv, ns: str, total: int, procs: int, conc: int, names: list[str] | None = None) -> float:
    if LOADER == "ab":
        return ab_rate(kind, srv, ns, total, conc * procs * (2 if kind == "create" else 1), names)
    per = total // procs
    c0 = cpu_seconds(srv.proc.pid)
    t0 = time.perf_counter()
    with mp.Pool(procs) as pool:
        res = pool.map(_worker, [(kind, srv.url, srv.token, str(srv.ca_file), ns, w, per, conc, names or [])
                                 for w in range(procs)])
    dt = time.perf_counter() - t0
    ok = sum(r[0] for r in res)
    errs = sum(r[1] for r in res)
    CPU[kind] = (cpu_seconds(srv.proc.pid) - c0) / max(ok, 1)
    if errs:
        print(f"    ({errs} {kind} errors)")
    return ok / dt


async def _watchers(url: str, token: str, ca: str, ns: str, rv: str, n: int, expect: int, out: mp.Queue,
                    ready: Event) -> None:
    lat: list[float] = []
    async with _session(url, token, ca, n + 2) as s:
        started = 0

        async def one() -> None:
            nonlocal started
            async with s.get(f"{url}/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion={rv}",
                             timeout=aiohttp.ClientTimeout(total=None)) as r:
                started += 1
                if started == n:
                    ready.set()
                seen = 0
                buf = b""
                async for chunk in r.content.iter_any():
                    now = time.time()
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        ev = json.loads(line)
                        sent = float(ev["object"]["metadata"]["annotations"]["sent"])
                        lat.append(now - sent)
                        seen += 1
                    if seen >= expect:
                        return

        await asyncio.gather(*(one() for _ in range(n)))
    out.put(lat)


def _watch_proc(*args) -> None:
    asyncio.run(_watchers(*args))


async def _writer(url: str, token: str, ca: str, ns: str, count: int, interval: float) -> None:
    async with _session(url, token, ca, 2) as s:
        for i in range(count):
            body = json.dumps(pod(f"lat-{i}", sent=repr(time.time())))
            async with s.post(f"{url}/api/v1/namespaces/{ns}/pods", data=body) as r:
                await r.read()
            await asyncio.sleep(interval)


def watch_latency(srv, ns: str, watchers: int, events: int, procs: int) -> tuple[float, float]:
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(srv.ca_file))
    req = urllib.request.Request(f"{srv.url}/api/v1/namespaces/{ns}/pods?limit=1",
                                 headers={"Authorization": f"Bearer {srv.token}"})
    rv = json.loads(urllib.request.urlopen(req, context=ctx).read())["metadata"]["resourceVersion"]
    q: mp.Queue = mp.Queue()
    readies = [mp.Event() for _ in range(procs)]
    ps = [mp.Process(target=_watch_proc, args=(srv.url, srv.token, str(srv.ca_file), ns, rv,
                                               watchers // procs, events, q, readies[i]))
          for i in range(procs)]
    for p in ps:
        p.start()
    for r in readies:
        r.wait(60)
    asyncio.run(_writer(srv.url, srv.token, str(srv.ca_file), ns, events, 0.01))
    lat: list[float] = []
    for _ in ps:
        lat += q.get(timeout=120)
    for p in ps:
        p.join()
    return pct(lat, 0.5) * 1000, pct(lat, 0.99) * 1000


def mkns(srv, name: str) -> None:
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(srv.ca_file))
    body = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}).encode()
    req = urllib.request.Request(f"{srv.url}/api/v1/namespaces", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {srv.token}",
                                          "Content-Type": "application/json"})
    urllib.request.urlopen(req, context=ctx).read()


def fill(srv, ns: str, n: int, procs: int, conc: int) -> list[str]:
    names = [f"p{i}" for i in range(n)]
    per = n // procs

    async def run(w: int) -> None:
        async with _session(srv.url, srv.token, str(srv.ca_file), conc) as s:
            it = iter(names[w * per:(w + 1) * per])

            async def one() -> None:
                for nm in it:
                    url = f"{srv.url}/api/v1/namespaces/{ns}/pods"
                    async with s.post(url, data=json.dumps(pod(nm))) as r:
                        await r.read()

            await asyncio.gather(*(one() for _ in range(conc)))

    for w in range(procs):
        asyncio.run(run(w))
    return names


def bench_backend(datastore: str, a: argparse.Namespace) -> dict[str, float]:
    if datastore == "etcd":  # a private etcd (Debian's etcd-server) for this run
        from nodeagent.testing.etcd import EtcdServer, available

        reason = available()
        if reason:
            raise RuntimeError(reason)
        with EtcdServer(name="bench-apiserver") as etcd:
            return bench_backend(f"etcd://{etcd.endpoint}", a)
    with tempfile.TemporaryDirectory(prefix="bench-apiserver-") as d:
        srv = start_server(Path(d), datastore)
        try:
            out: dict[str, float] = {}
            mkns(srv, "c")
            with _spy(a, srv, "creates"):
                out["creates/s"] = rate("create", srv, "c", a.creates, a.procs, a.concurrency)
            out["  server CPU-bound creates/s/core"] = 1 / CPU["create"]
            mkns(srv, "g")
            names = fill(srv, "g", 1000, 2, 16)
            with _spy(a, srv, "gets"):
                out["gets/s"] = rate("get", srv, "g", a.gets, a.procs, a.concurrency, names)
            out["  server CPU-bound gets/s/core"] = 1 / CPU["get"]
            with _spy(a, srv, "lists (1k pods)"):
                out["lists/s (1k pods)"] = rate("list", srv, "g", a.lists_1k, a.procs, 4)
            out["  server CPU-bound lists/s/core (1k)"] = 1 / CPU["list"]
            if a.big:
                mkns(srv, "big")
                fill(srv, "big", 10000, 2, 16)
                out["lists/s (10k pods)"] = rate("list", srv, "big", max(a.procs, a.lists_10k), a.procs, 1)
                out["  server CPU-bound lists/s/core (10k)"] = 1 / CPU["list"]
            mkns(srv, "w")
            with _spy(a, srv, f"watch fan-out ({a.watchers} watchers)"):
                p50, p99 = watch_latency(srv, "w", a.watchers, a.events, a.procs)
            out[f"watch p50 ms ({a.watchers} watchers)"] = p50
            out[f"watch p99 ms ({a.watchers} watchers)"] = p99
            return out
        finally:
            srv.stop()


def _spy(a: argparse.Namespace, srv: Any, phase: str) -> contextlib.AbstractContextManager[None]:
    """py-spy over the server during one phase (--py-spy), else nothing."""
    if not a.py_spy:
        return contextlib.nullcontext()
    print(f"   [py-spy: server during {phase}]", flush=True)
    return pyspy.recording(srv.proc.pid)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datastores", default="sqlite,etcd,memory",
                   help="comma-separated backends to compare: memory, sqlite, etcd (a private etcd is "
                        "started) or etcd://HOST:PORT")
    p.add_argument("--creates", type=int, default=4000)
    p.add_argument("--gets", type=int, default=20000)
    p.add_argument("--lists-1k", type=int, default=100)
    p.add_argument("--lists-10k", type=int, default=10)
    p.add_argument("--no-10k", dest="big", action="store_false", help="skip the 10k-pod list")
    p.add_argument("--watchers", type=int, default=100)
    p.add_argument("--events", type=int, default=200)
    p.add_argument("--procs", type=int, default=2, help="client processes")
    p.add_argument("--concurrency", type=int, default=16, help="in-flight requests per client process")
    p.add_argument("--loader", choices=["auto", "ab", "python"], default="auto",
                   help="load generator for creates/gets/lists: ApacheBench (apache2-utils) when installed, "
                        "else Python client processes (default: auto)")
    p.add_argument("--py-spy", action="store_true",
                   help="sample the server with py-spy during each phase and print the top functions")
    add_plot_argument(p)
    a = p.parse_args()
    global LOADER
    import shutil

    LOADER = "ab" if a.loader == "ab" or (a.loader == "auto" and shutil.which("ab")) else "python"
    print(f"load generator: {LOADER}")
    results = {}
    for ds in a.datastores.split(","):
        print(f"== {ds}", flush=True)
        try:
            results[ds] = bench_backend(ds, a)
        except Exception as e:  # a backend not built in: say so, keep the others
            print(f"   {ds}: {e}".splitlines()[0])
            continue
        for k, v in results[ds].items():
            print(f"   {k:38s} {v:10.1f}", flush=True)
    print("\nmetric".ljust(39) + "".join(f"{ds[:18]:>20s}" for ds in results) + "      target (2 cores)")
    targets = {"creates/s": ">= 1000 (sqlite)", "gets/s": ">= 5000 (sqlite)"}
    keys = list(next(iter(results.values())).keys()) if results else []
    for k in keys:
        tgt = targets.get(k, "< 50 (p99)" if "p99" in k else "")
        figures = "".join(f"{results[ds].get(k, float('nan')):20.1f}" for ds in results)
        print(f"{k:38s}" + figures + f"      {tgt}")
    print("(shared 2-core machine, clients and server on the same cores; the CPU-bound rows divide the ops "
          "by\n the server process's own CPU seconds: its capacity per core when the machine is not "
          "oversubscribed)")
    if a.plot:
        plot_bars(a.plot, {k: {ds: results[ds][k] for ds in results if k in results[ds]}
                           for k in keys if "/s" in k and not k.startswith(" ")},
                  "apiserver over HTTPS: requests per second per datastore", "per second", logy=True)
        print(f"plot: {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

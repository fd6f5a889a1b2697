"""Requests through the Ingress (HAProxy run by `nodeagent ingress`) beside the floor and ClusterIP, and
what reloads cost (issue 24).

Starts `nodeagent up` under a private data dir (its ingress on free ports), two busybox-httpd pods
behind Service `web` and an Ingress for `web.bench`, then runs Debian's `ab` (apache2-utils), with the
same concurrency and keep-alive, against:

  pod        one pod's IP directly: the floor (no proxy, no NAT)
  clusterip  the Service's ClusterIP (netproxy's iptables DNAT, no proxy)
  ingress    the node's ingress port with Host: web.bench (HAProxy, spread over both pods)

and prints requests/s and p50/p99 (ms) for each. Then the reload cost: `ab` runs against a second
Ingress (Service `churn`, its EndpointSlice written by this script) while --changes changes are made,
and prints the failed requests (connection errors + non-2xx) and p99, for two kinds of change:

  endpoints  the slice's endpoints alternate between pod A, A+B and B (HAProxy's runtime API, no reload)
  config     a path of a third Ingress changes (a new config: validated, then a master-worker reload)

Run as root; the machine may be shared, so the load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import add_plot_argument, plot_bars
from nodeagent.client.rest import Client

WHOAMI = ["sh", "-c",
          "mkdir -p /tmp/www && hostname > /tmp/www/index.html && exec httpd -f -p 80 -h /tmp/www"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def ab(url: str, host: str | None, a: argparse.Namespace, seconds: float | None = None) -> dict[str, Any]:
    """One `ab` run: requests/s, p50 and p99 (ms), failed requests (errors + non-2xx)."""
    with tempfile.NamedTemporaryFile("r", suffix=".csv") as pct:
        argv = ["ab", "-q", "-k", "-c", str(a.concurrency), "-e", pct.name, "-s", "5"]
        argv += ["-t", str(seconds), "-n", "10000000"] if seconds else ["-n", str(a.requests)]
        if host:
            argv += ["-H", f"Host: {host}"]
        p = subprocess.run([*argv, url], capture_output=True, text=True, check=False)
        table = dict(line.split(",") for line in pct.read().splitlines()[1:] if "," in line)
    out = p.stdout
    if p.returncode != 0 and "Requests per second" not in out:
        raise SystemExit(f"ab {url}: {(p.stderr or out).strip().splitlines()[0]}")

    def num(pattern: str) -> float:
        m = re.search(pattern, out)
        return float(m.group(1)) if m else 0.0

    # ab counts a body whose length differs from the first one's as failed ("Length"): two backends may
    # answer bodies of different lengths, so only connection errors and non-2xx answers count here
    errors = sum(num(rf"{what}: (\d+)") for what in ("Connect", "Receive", "Exceptions"))
    return {"rps": num(r"Requests per second:\s+([\d.]+)"), "p50": float(table.get("50", "nan")),
            "p99": float(table.get("99", "nan")), "requests": num(r"Complete requests:\s+(\d+)"),
            "failed": errors + num(r"Non-2xx responses:\s+(\d+)"), "length": num(r"Length: (\d+)"),
            "why": " ".join(line.strip() for line in out.splitlines()
                            if line.strip().startswith(("Failed requests", "(Connect", "Non-2xx")))}


def pod(name: str, node: str, app: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "web", "image": "localhost/httpd:v1", "imagePullPolicy": "Never",
                                     "command": WHOAMI}]}}


def ingress(name: str, host: str, service: str, path: str = "/") -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": name},
            "spec": {"rules": [{"host": host, "http": {"paths": [
                {"path": path, "pathType": "Prefix",
                 "backend": {"service": {"name": service, "port": {"number": 80}}}}]}}]}}


async def setup(kc: Path, node: str) -> tuple[list[str], str]:
    """The pods, Services, slice and Ingresses; the pods' IPs and web's ClusterIP once they serve."""
    async with Client.from_kubeconfig(kc) as c:
        for i in range(2):
            await c.create("pods", pod(f"web-{i}", node, "web"), "default")
        await c.create("services", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                                    "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}, "default")
        await c.create("services", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "churn"},
                                    "spec": {"ports": [{"port": 80}]}}, "default")
        for obj in (ingress("web", "web.bench", "web"), ingress("churn", "churn.bench", "churn"),
                    ingress("config", "config.bench", "web", "/v0")):
            await c.create("ingresses.networking.k8s.io", obj, "default")
        end = time.monotonic() + 120
        while time.monotonic() < end:
            pods = (await c.list("pods", "default", label_selector="app=web"))["items"]
            ips = [p["status"].get("podIP") for p in pods if p["status"].get("phase") == "Running"]
            if len(ips) == 2 and all(ips):
                svc = await c.get("services", "web", "default")
                await c.create("endpointslices.discovery.k8s.io", slice_of(ips), "default")
                return sorted(ips), svc["spec"]["clusterIP"]
            await asyncio.sleep(0.3)
    raise SystemExit("the pods did not start in 120 s")


def slice_of(ips: list[str]) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": "churn-1", "labels": {"kubernetes.io/service-name": "churn"}},
            "ports": [{"name": "", "port": 80, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips]}


async def churn(kc: Path, kind: str, ips: list[str], changes: int, interval: float) -> None:
    sets = [[ips[0]], ips, [ips[1]], ips]
    async with Client.from_kubeconfig(kc) as c:
        for i in range(changes):
            if kind == "endpoints":
                sl = await c.get("endpointslices.discovery.k8s.io", "churn-1", "default")
                sl["endpoints"] = slice_of(sets[i % len(sets)])["endpoints"]
                await c.update("endpointslices.discovery.k8s.io", sl)
            else:
                await c.patch("ingresses.networking.k8s.io", "config", {"spec": {"rules": [
                    ingress("config", "config.bench", "web", f"/v{i + 1}")["spec"]["rules"][0]]}}, "default")
            await asyncio.sleep(interval)


def during(kc: Path, kind: str, ips: list[str], url: str, a: argparse.Namespace) -> dict[str, Any]:
    """ab against churn.bench for the whole run of `changes` changes of `kind`."""
    seconds = a.changes * a.interval + 3
    loop_out: dict[str, Any] = {}

    async def both() -> None:
        ab_task = asyncio.create_task(asyncio.to_thread(ab, url, "churn.bench", a, seconds))
        await asyncio.sleep(1)
        await churn(kc, kind, ips, a.changes, a.interval)
        loop_out.update(await ab_task)

    asyncio.run(both())
    return loop_out


async def delete_pods(kc: Path) -> None:
    """The pods gone (the kubelet stopped them) before `up` stops: pods outlive the agent."""
    async with Client.from_kubeconfig(kc) as c:
        for i in range(2):
            with contextlib.suppress(Exception):
                await c.delete("pods", f"web-{i}", "default", grace_period=0)
        for _ in range(120):
            if not (await c.list("pods", "default"))["items"]:
                return
            await asyncio.sleep(0.5)


def wait_http(url: str, host: str, want: int = 200, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        p = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "2",
                            "-H", f"Host: {host}", url], capture_output=True, text=True, check=False)
        if p.stdout == str(want):
            return
        time.sleep(0.3)
    raise SystemExit(f"{url} (Host: {host}) did not answer {want} in {timeout:.0f}s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20000, help="requests per ab run (default: %(default)s)")
    ap.add_argument("--concurrency", type=int, default=8, help="ab's -c (default: %(default)s)")
    ap.add_argument("--changes", type=int, default=100,
                    help="changes during the reload runs (default: %(default)s)")
    ap.add_argument("--interval", type=float, default=0.1,
                    help="seconds between changes (default: %(default)s)")
    add_plot_argument(ap)
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root")
    if not shutil.which("ab"):
        raise SystemExit("ab not found (apt-get install apache2-utils)")
    from cni.install import install
    from nodeagent.testing.images import ImageFactory

    root = Path(tempfile.mkdtemp(prefix="ingb-"))
    data = root / "data"
    data.mkdir()
    install(str(root / "cni-bin"), None)
    img = ImageFactory(root / "images").httpd
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(data / "images"), "import",
                    "--no-progress", str(img.docker_archive)], check=True, capture_output=True)
    http = free_port()
    node = f"ingb-{os.getpid()}"
    log = open(data / "up.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "--log-level", "warning", "up", "--data-dir",
                             str(data), "--node-name", node, "--bind-address", "127.0.0.1",
                             "--cni-bin-dir", str(root / "cni-bin"), "--cni-bin-dir", "/usr/lib/cni",
                             "--ingress-http-port", str(http), "--ingress-https-port", str(free_port())],
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    try:
        kc = data / "admin.kubeconfig"
        end = time.monotonic() + 90
        while not kc.exists():
            if proc.poll() is not None or time.monotonic() > end:
                raise SystemExit(f"`up` did not start:\n{(data / 'up.log').read_text()[-3000:]}")
            time.sleep(0.2)
        time.sleep(2)
        ips, cluster_ip = asyncio.run(setup(kc, node))
        ingress_url = f"http://127.0.0.1:{http}/"
        wait_http(ingress_url, "web.bench")
        wait_http(ingress_url, "churn.bench")
        wait_http(f"http://{cluster_ip}/", "web")
        rows = [("pod (floor)", ab(f"http://{ips[0]}/", None, a)),
                ("clusterip", ab(f"http://{cluster_ip}/", None, a)),
                ("ingress", ab(ingress_url, "web.bench", a))]
        load = os.getloadavg()
        print(f"\n{a.requests} requests per run, concurrency {a.concurrency}, keep-alive; "
              f"load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
        print(f"{'path':<14}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'failed':>8}{'other length':>14}")
        for name, r in rows:
            print(f"{name:<14}{r['rps']:>10.0f}{r['p50']:>9.1f}{r['p99']:>9.1f}{r['failed']:>8.0f}"
                  f"{r['length']:>14.0f}")
        for name, r in rows:
            if r["failed"] or r["length"]:
                print(f"  {name}: ab says {r['why']}")
        print(f"\nduring {a.changes} changes, one every {a.interval}s (ab with the same settings, by time):")
        print(f"{'change':<14}{'requests':>10}{'failed':>8}{'p50 ms':>9}{'p99 ms':>9}")
        for kind in ("endpoints", "config"):
            r = during(kc, kind, ips, ingress_url, a)
            print(f"{kind:<14}{r['requests']:>10.0f}{r['failed']:>8.0f}{r['p50']:>9.1f}{r['p99']:>9.1f}")
            rows.append((f"ingress during {kind} changes", r))
        if a.plot:
            plot_bars(a.plot, {name: {"p50": r["p50"], "p99": r["p99"]} for name, r in rows},
                      f"HTTP latency per path (ab -k -c {a.concurrency})", "ms")
            print(f"plot: {a.plot}")
    finally:
        with contextlib.suppress(Exception):
            asyncio.run(delete_pods(data / "admin.kubeconfig"))
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=90)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        # whatever the pods' deletion left (a run stopped early): stopped and removed as a person would
        subprocess.run([sys.executable, "-m", "nodeagent", "reset", "--data-dir", str(data),
                        "--cni-bin-dir", str(root / "cni-bin")], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

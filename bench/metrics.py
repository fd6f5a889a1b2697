"""Resource metrics at a full node (issue 23): `kubectl top pods -A` latency and the kubelet's scrape cost.

Starts `nodeagent up` under a private data dir, imports the busybox test image, runs --pods pods (kubelet's
maxPods, 110) bound to the node, and waits until metrics.k8s.io has every one of them. Then:

  kubectl top   `kubectl top pods -A` run --runs times: p50/p99 wall time, beside `kubectl get pods -A`
                (the same kubectl, apiserver and 110 pods, a plain list: the reference floor) and the
                metrics API's own GET of the pod list, timed in process.
  scrape cost   the kubelet's /metrics/resource and /metrics/cadvisor fetched straight from its HTTPS port
                (with the apiserver's kubelet client certificate) --scrapes times each: wall p50/p99 and
                CPU per scrape of the `up` process tree (kubelet and runtime live there), the idle rate
                measured over the same time subtracted; /stats/summary (what metrics-server scraped before
                /metrics/resource existed) measured the same way as the reference.

The apiserver's own scrape runs every --metric-resolution; it is there in both the idle and the measured
stretch. The machine may be shared: the load average is printed beside the figures. Run as root.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import CdfPanel, add_plot_argument, pct, plot_cdf_panels

CLK_TCK = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """CPU seconds (user+system) of `root` and every descendant, from /proc."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            raw = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()
        parent[int(d)] = int(fields[1])
        cpu[int(d)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    total, todo, seen = 0.0, [root], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += cpu.get(p, 0.0)
        todo += [c for c, pp in parent.items() if pp == p]
    return total


def pod(name: str, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "localhost/busybox:latest",
                                     "imagePullPolicy": "Never", "command": ["sleep", "3600"],
                                     "resources": {"requests": {"cpu": "5m", "memory": "8Mi"}}}]}}


def kubectl(kubeconfig: Path, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    p = subprocess.run(["kubectl", *args], capture_output=True, text=True,
                       env={**os.environ, "KUBECONFIG": str(kubeconfig)}, timeout=120)
    return time.perf_counter() - t0, p


async def scrape_cost(pid: int, url: str, ctx: ssl.SSLContext, n: int,
                      idle_rate: float) -> tuple[list[float], float, int]:
    """(wall times, CPU seconds per scrape beyond idle, body bytes) of `n` GETs of `url`."""
    import aiohttp

    walls: list[float] = []
    size = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as s:
        c0, t0 = tree_cpu(pid), time.monotonic()
        for _ in range(n):
            w0 = time.perf_counter()
            async with s.get(url) as r:
                body = await r.read()
                if r.status != 200:
                    raise SystemExit(f"{url}: {r.status} {body[:200]!r}")
            walls.append(time.perf_counter() - w0)
            size = len(body)
        c1, t1 = tree_cpu(pid), time.monotonic()
    return walls, max(0.0, (c1 - c0) - idle_rate * (t1 - t0)) / n, size


async def metrics_api_latency(kubeconfig: Path, runs: int) -> list[float]:
    from nodeagent.client.rest import Client

    out = []
    async with Client.from_kubeconfig(kubeconfig) as c:
        for _ in range(runs):
            t0 = time.perf_counter()
            await c.request("GET", "/apis/metrics.k8s.io/v1beta1/pods")
            out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=110, help="pods on the node (default: %(default)s)")
    ap.add_argument("--runs", type=int, default=20,
                    help="kubectl runs of each command (default: %(default)s)")
    ap.add_argument("--scrapes", type=int, default=20, help="scrapes of each endpoint (default: %(default)s)")
    ap.add_argument("--metric-resolution", default="15s", help="the apiserver's scrape period")
    add_plot_argument(ap)
    args = ap.parse_args()
    from nodeagent.testing.images import ImageFactory

    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        root = Path(tmp)
        data = root / "data"
        data.mkdir()
        img = ImageFactory(root / "images").busybox
        subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(data / "images"),
                        "import", "--no-progress", str(img.docker_archive)], check=True, capture_output=True)
        node = f"bm{os.getpid() % 100000}"
        log = open(data / "up.log", "ab")
        up = subprocess.Popen([sys.executable, "-m", "nodeagent", "--log-level", "warning", "up",
                               "--data-dir", str(data), "--node-name", node, "--bind-address", "127.0.0.1",
                               "--metric-resolution", args.metric_resolution],
                              stdout=log, stderr=subprocess.STDOUT)
        kubeconfig = data / "admin.kubeconfig"
        try:
            run(args, up, data, kubeconfig, node)
        finally:
            kubectl(kubeconfig, "delete", "pods", "--all", "--wait=true", "--timeout=300s")
            up.send_signal(2)
            try:
                up.wait(timeout=120)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
            log.close()


def run(args: argparse.Namespace, up: subprocess.Popen, data: Path, kubeconfig: Path, node: str) -> None:
    end = time.monotonic() + 120
    while True:
        _, p = kubectl(kubeconfig, "get", "node", node, "-o", "json")
        if p.returncode == 0:
            break
        if up.poll() is not None or time.monotonic() > end:
            raise SystemExit(f"nodeagent up did not come up: {(data / 'up.log').read_text()[-3000:]}")
        time.sleep(1)
    items = [pod(f"m{i:03d}", node) for i in range(args.pods)]
    kubectl_apply = subprocess.run(["kubectl", "apply", "-f", "-"], input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": items}), capture_output=True, text=True,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)})
    if kubectl_apply.returncode != 0:
        raise SystemExit(kubectl_apply.stderr)
    t0 = time.monotonic()
    while True:
        _, p = kubectl(kubeconfig, "top", "pods", "-A", "--no-headers")
        have = len(p.stdout.strip().splitlines()) if p.returncode == 0 else 0
        if have >= args.pods:
            break
        if time.monotonic() - t0 > 900:
            raise SystemExit(f"only {have} of {args.pods} pods have metrics after 900 s")
        time.sleep(2)
    print(f"{args.pods} pods running with metrics after {time.monotonic() - t0:.0f} s; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)

    def timed(*cmd: str) -> list[float]:
        out = []
        for _ in range(args.runs):
            wall, p = kubectl(kubeconfig, *cmd)
            if p.returncode != 0:
                raise SystemExit(f"kubectl {' '.join(cmd)}: {p.stderr}")
            out.append(wall)
        return out

    top = timed("top", "pods", "-A")
    get = timed("get", "pods", "-A")
    api = asyncio.run(metrics_api_latency(kubeconfig, args.runs))
    print(f"\nkubectl top pods -A ({args.pods} pods, {args.runs} runs)")
    print(f"  kubectl top pods -A                      p50 {pct(top, .5) * 1000:7.1f} ms  "
          f"p99 {pct(top, .99) * 1000:7.1f} ms")
    print(f"  reference: kubectl get pods -A           p50 {pct(get, .5) * 1000:7.1f} ms  "
          f"p99 {pct(get, .99) * 1000:7.1f} ms")
    print(f"  GET metrics.k8s.io pods (in process)     p50 {pct(api, .5) * 1000:7.1f} ms  "
          f"p99 {pct(api, .99) * 1000:7.1f} ms")

    _, p = kubectl(kubeconfig, "get", "node", node, "-o", "json")
    st = json.loads(p.stdout)["status"]
    port = st["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.load_cert_chain(str(data / "pki/apiserver-kubelet-client.crt"),
                        str(data / "pki/apiserver-kubelet-client.key"))
    c0, t0 = tree_cpu(up.pid), time.monotonic()
    time.sleep(10)
    idle = (tree_cpu(up.pid) - c0) / (time.monotonic() - t0)
    print(f"\nkubelet scrapes ({args.pods} pods, {args.scrapes} each; idle `up` tree {idle * 100:.1f}% of a "
          f"core subtracted; load {os.getloadavg()[0]:.1f})")
    scrapes: dict[str, list[float]] = {}
    for path, note in (("/metrics/resource", ""), ("/metrics/cadvisor", ""),
                       ("/stats/summary", "  (reference: the Summary API)")):
        walls, cpu, size = asyncio.run(scrape_cost(up.pid, f"https://127.0.0.1:{port}{path}", ctx,
                                                   args.scrapes, idle))
        print(f"  {path:<20} p50 {pct(walls, .5) * 1000:7.1f} ms  p99 {pct(walls, .99) * 1000:7.1f} ms  "
              f"CPU {cpu * 1000:6.1f} ms/scrape  {size / 1024:6.0f} KiB{note}", flush=True)
        scrapes[path + note] = walls
    if args.plot:
        plot_cdf_panels(args.plot, [
            CdfPanel(f"kubectl top pods -A, {args.pods} pods", {
                "kubectl top pods -A": top, "reference: kubectl get pods -A": get,
                "GET metrics.k8s.io pods (in process)": api}),
            CdfPanel("kubelet scrapes, wall time", scrapes)], "resource metrics at a full node")
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()

"""Interactive stream latency: exec with stdin through apiserver → kubelet → runtime, one line echoed.

Two nodes run side by side — `nodeagent up` on ours (the CRI daemon inside it) and `nodeagent up` on
containerd + runc from Debian (--container-runtime-endpoint), each under a private data dir with one busybox
pod — and the Python `kubernetes` client's `stream()` (websocket, the newest channel protocol the
runtime's streaming server offers) drives both, their samples interleaved one by one:

  session  open an exec of `cat` with stdin, write one line, read it back, close: --sessions times (what a
           script pays per `kubectl exec -i`-like call: the upgrade through both proxies, the runtime's
           exec, the first byte).
  line     in one open `cat` session, write a line and time until its echo arrives: --lines times (what a
           user's keystroke-to-echo costs once the session is up).

Prints p50/p99 per runtime side by side, with the load average (the machine may be shared). Run as root.
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pod_startup import (
    clear_node,
    prepare_runtime,
    running,
    start_up,
    stop,
    unmount_left,
    wait_started,
)
from bench.report import add_plot_argument, latency_table, plot_cdf

POD = "echo"


def _pod(node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "namespace": "default"},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "localhost/busybox:latest",
                                     "imagePullPolicy": "Never", "command": ["sleep", "3600"]}]}}


async def _create_and_wait(kubeconfig: Path, node: str) -> None:
    from nodeagent.client.rest import Client

    client = Client.from_kubeconfig(kubeconfig)
    try:
        await client.create("pods", _pod(node), "default")
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if running(await client.get("pods", POD, "default")):
                return
            await asyncio.sleep(0.2)
        raise SystemExit(f"pod {POD} did not turn Running in 120 s")
    finally:
        await client.close()


def _read_until(ws, want: str, timeout: float = 30) -> None:
    got = ""
    end = time.monotonic() + timeout
    while want not in got:
        left = end - time.monotonic()
        if left <= 0 or not ws.is_open():
            raise SystemExit(f"no echo of {want!r} (got {got!r})")
        got += ws.read_stdout(timeout=left)


class Node:
    """One `nodeagent up` on a runtime with the echo pod Running, and a Python client of its API."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.data = root / kind / "data"
        self.data.mkdir(parents=True)
        self.ctd, extra = prepare_runtime(kind, root, self.data)
        self.node = f"bench-st-{kind[:3]}-{os.getpid()}"
        self.kubeconfig = self.data / "admin.kubeconfig"
        self.socket = self.ctd.ctd.socket if self.ctd else str(self.data / "cri.sock")
        self.proc = start_up(self.data, self.node, extra)
        self.protocol = ""
        self.api: Any = None

    def start(self) -> None:
        from kubernetes import client, config

        wait_started(self.proc, self.data, self.socket)
        asyncio.run(_create_and_wait(self.kubeconfig, self.node))
        self.api = config.new_client_from_config(config_file=str(self.kubeconfig))
        self.core = client.CoreV1Api(self.api)

    def open_cat(self) -> Any:
        from kubernetes.stream import stream

        ws = stream(self.core.connect_get_namespaced_pod_exec, POD, "default", command=["cat"], stdin=True,
                    stdout=True, stderr=False, tty=False, _preload_content=False)
        self.protocol = ws.subprotocol or self.protocol
        return ws

    def stop(self) -> None:
        if self.api is not None:
            self.api.close()
        with contextlib.suppress(Exception):
            clear_node(self.kubeconfig, self.socket, self.data / "kubelet", self.kind)
        stop(self.proc)
        if self.ctd is not None:
            self.ctd.stop()
        unmount_left(self.data, self.kind)


def session(node: Node, i: int) -> float:
    """Open `cat`, one line echoed, close: seconds."""
    t0 = time.perf_counter()
    ws = node.open_cat()
    try:
        ws.write_stdin(f"s{i}\n")
        _read_until(ws, f"s{i}\n")
        return time.perf_counter() - t0
    finally:
        ws.close()


def line(ws: Any, i: int) -> float:
    """One line echoed in an open session: seconds."""
    t0 = time.perf_counter()
    ws.write_stdin(f"line {i}\n")
    _read_until(ws, f"line {i}\n")
    return time.perf_counter() - t0


def measure(nodes: list[Node], sessions: int, lines: int) -> dict[str, dict[str, list[float]]]:
    """Latencies by runtime and phase, the runtimes' samples interleaved one by one (the machine's load
    drifts; neither runtime gets the quieter minutes)."""
    out: dict[str, dict[str, list[float]]] = {n.kind: {"session": [], "line": []} for n in nodes}
    for i in range(sessions):
        for n in nodes:
            out[n.kind]["session"].append(session(n, i))
    open_ws = [n.open_cat() for n in nodes]
    try:
        for ws in open_ws:
            ws.write_stdin("warm\n")
            _read_until(ws, "warm\n")
        for i in range(lines):
            for n, ws in zip(nodes, open_ws, strict=True):
                out[n.kind]["line"].append(line(ws, i))
    finally:
        for ws in open_ws:
            ws.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=50,
                   help="exec sessions opened, one line echoed in each (default %(default)s)")
    p.add_argument("--lines", type=int, default=200,
                   help="lines echoed within one open session (default %(default)s)")
    p.add_argument("--settle-seconds", type=float, default=10,
                   help="wait after the pod is Running before measuring (default %(default)s)")
    p.add_argument("--runtime", choices=["both", "nodeagent", "containerd"], default="both")
    p.add_argument("--keep", action="store_true", help="keep the data dirs")
    add_plot_argument(p)
    a = p.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="na-bench-stream-"))
    kinds = ["nodeagent", "containerd"] if a.runtime == "both" else [a.runtime]
    nodes: list[Node] = []
    try:
        for k in kinds:
            nodes.append(Node(k, root))
        for n in nodes:
            n.start()
        time.sleep(a.settle_seconds)  # the nodes' start-up work (first syncs, status writes) done
        results = measure(nodes, a.sessions, a.lines)
    finally:
        for n in nodes:
            n.stop()
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    protocols = {n.kind: n.protocol for n in nodes}
    load = os.getloadavg()
    print(f"interactive exec through apiserver -> kubelet -> runtime, Python client stream(); load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores (shared machine)")
    print(f"{'':<36}" + "".join(f"{k:>22}" for k in kinds))
    print(f"{'channel protocol':<36}" + "".join(f"{protocols[k]:>22}" for k in kinds))
    rows = {f"{k}: {label}": results[k][phase] for phase, label in (
        ("session", "open + 1 line echoed + close"), ("line", "1 line echoed in a session")) for k in kinds}
    print(latency_table(rows))
    if a.plot:
        plot_cdf(a.plot, rows, "interactive exec through apiserver -> kubelet -> runtime")
        print(f"plot: {a.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

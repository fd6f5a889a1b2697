"""Helpers for tests on a `nodeagent lab`: kubectl against it, commands in a node's or a pod's netns."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from nodeagent.lab import cluster
from nodeagent.lab.topology import Topology

HTTPD = "localhost/httpd:v1"


class Lab:
    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        home = Path(topo.lab_dir, "home")
        home.mkdir(exist_ok=True)
        self.env = {**os.environ, "KUBECONFIG": topo.kubeconfig, "HOME": str(home)}
        self.state = cluster.load(topo.lab_dir)

    @property
    def mode(self) -> str:
        """The pod network's backend the lab was brought up with (host-gw, vxlan, ipip)."""
        return self.state["topology"]["network"]

    def node(self, name: str):
        return next(n for n in self.topo.nodes if n.name == name)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> str:
        p = subprocess.run(["kubectl", *args], env=self.env, input=input, capture_output=True, text=True,
                           check=False, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {p.stderr.strip()}")
        return p.stdout

    def apply(self, obj: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def pods(self, selector: str) -> list[dict[str, Any]]:
        return self.get("pods", "-l", selector)["items"]

    def wait(self, what: str, fn, timeout: float = 90, interval: float = 0.5):
        end = time.monotonic() + timeout
        last = None
        while time.monotonic() < end:
            try:
                last = fn()
            except AssertionError as e:
                last = e
            else:
                if last:
                    return last
            time.sleep(interval)
        raise AssertionError(f"timed out waiting for {what}: {last!r}")

    def running(self, selector: str, n: int, timeout: float = 120, where=None) -> list[dict[str, Any]]:
        """Wait for exactly n running, ready, not deleted pods (each also satisfying `where`)."""
        def ok():
            ps = [p for p in self.pods(selector) if not p["metadata"].get("deletionTimestamp")
                  and (where is None or where(p))
                  and p["status"].get("phase") == "Running" and p["status"].get("podIP")
                  and all(c.get("ready") for c in p["status"].get("containerStatuses") or [{}])]
            return ps if len(ps) == n else None
        return self.wait(f"{n} running pods {selector}", ok, timeout)

    def on_node(self, node: str, *argv: str, check: bool = False) -> subprocess.CompletedProcess:
        return cluster.exec_in(self.node(node), *argv, check=check)

    def in_pod(self, pod: dict[str, Any], *argv: str) -> subprocess.CompletedProcess:
        """argv (a host binary) inside the pod's network namespace, found through the pod's cgroup."""
        pid = pod_pid(pod["metadata"]["uid"])
        return subprocess.run(["nsenter", "-t", str(pid), "-n", *argv], capture_output=True, text=True,
                              check=False, timeout=60)


def pod_pid(uid: str) -> int:
    needle = f"pod{uid}"
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if needle in Path("/proc", d, "cgroup").read_text():
                return int(d)
        except OSError:
            continue
    raise AssertionError(f"no process of pod {uid}")


def ping(lab: Lab, pod: dict[str, Any], ip: str) -> subprocess.CompletedProcess:
    return lab.in_pod(pod, "busybox", "ping", "-c", "2", "-W", "3", "-i", "0.3", ip)


def http(lab: Lab, pod_or_node: Any, url: str) -> str:
    argv = ["curl", "-sS", "-m", "5", url]
    p = lab.on_node(pod_or_node, *argv) if isinstance(pod_or_node, str) else lab.in_pod(pod_or_node, *argv)
    return p.stdout if p.returncode == 0 else f"ERROR {p.returncode}: {p.stderr.strip()}"


def web_pod(name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "httpd", "image": HTTPD, "imagePullPolicy": "Never"}]}}


def start_lab(tmp: Path, images, nodes: int, network: str, **kw: Any) -> Lab:
    topo = cluster.up(tmp / "lab", nodes, network, [str(images.httpd.docker_archive)], **kw)
    return Lab(topo)


def stop_lab(lab: Lab) -> None:
    """`lab down`, then prove nothing of the lab is left on the host."""
    netns, links, roots = lab.state["netns"], lab.state["links"], lab.state["cgroup_roots"]
    pids = list(lab.state["pids"].values())
    cluster.down(lab.topo.lab_dir)
    left = cluster.leftovers(lab.topo.lab_dir, netns, links, roots)
    left += [f"process {p}" for p in pids if cluster._alive(p)]
    left += [f"process {d}" for d in os.listdir("/proc") if d.isdigit() and _cmdline_has(d, lab.topo.lab_dir)]
    left += [f"mount {line.split()[4]}" for line in Path("/proc/self/mountinfo").read_text().splitlines()
             if lab.topo.lab_dir in line]
    assert not left, left


def _cmdline_has(pid: str, text: str) -> bool:
    try:
        return text.encode() in Path("/proc", pid, "cmdline").read_bytes()
    except OSError:
        return False

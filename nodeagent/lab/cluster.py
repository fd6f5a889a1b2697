"""Bring a netns lab up and take it down again, leaving nothing behind.

Each node is a network namespace joined to an underlay bridge on the host by a veth; its processes run
in that netns and in a mount namespace of their own (slave of the host's) with a fresh sysfs, so
/sys/class/net shows the node's links, and the host's cgroup tree bound back under /sys/fs/cgroup.
Node 1 also runs the server, listening on its underlay address. Everything made is recorded in
<dir>/lab.json before it is made, so `down` (also after a failed `up`) removes exactly that.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from kernel.cgroups.tree import kill_tree, tree_dirs
from kernel.fs import atomic_write
from kernel.procs import alive as _alive
from nodeagent.kubelet import config_file
from nodeagent.lab.topology import API_PORT, POD_CLUSTER_CIDR, NodeSpec, Topology, topology
from nodeagent.layout import Layout

log = logging.getLogger("nodeagent.lab")

STATE = "lab.json"

# Runs as: nsenter --net=NS unshare --mount --propagation slave sh -c LAUNCH sh <host-cgroup-bind-dir> argv...
LAUNCH = """set -e
d="$1"; shift
mkdir -p "$d"
mount --rbind /sys/fs/cgroup "$d"
mount -t sysfs sysfs /sys
mount --rbind "$d" /sys/fs/cgroup
umount -l "$d"
exec "$@"
"""


class LabError(RuntimeError):
    pass


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and p.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {p.stderr.strip() or p.stdout.strip()}")
    return p


class State:
    """lab.json: what this lab made, written before making it."""

    def __init__(self, lab_dir: Path) -> None:
        self.path = lab_dir / STATE
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.exists() else {
            "netns": [], "links": [], "pids": {}, "cgroup_roots": [], "bind_dirs": [], "notrack": []}

    def add(self, key: str, value: Any) -> None:
        if value not in self.data[key]:
            self.data[key].append(value)
        self.save()

    def pid(self, name: str, pid: int) -> None:
        self.data["pids"][name] = pid
        self.save()

    def save(self) -> None:
        atomic_write(self.path, json.dumps(self.data, indent=1))


def node_command(node: NodeSpec, argv: list[str]) -> list[str]:
    """argv run inside the node's netns and its own mount namespace (see LAUNCH)."""
    bind = str(Path(node.data_dir, ".host-cgroup"))
    return ["nsenter", f"--net=/run/netns/{node.netns}", "--", "unshare", "--mount", "--propagation", "slave",
            "--", "sh", "-c", LAUNCH, "sh", bind, *argv]


def exec_in(node: NodeSpec, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """A short command in the node's netns (for tests and `lab`'s own setup)."""
    return _sh("ip", "netns", "exec", node.netns, *argv, check=check)


def _start(state: State, name: str, argv: list[str], log_path: Path) -> subprocess.Popen:
    with open(log_path, "ab") as f:
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    state.pid(name, p.pid)
    return p


def _notrack_rule(bridge: str) -> list[str]:
    """Frames between nodes cross the host's bridge; with br_netfilter the host's conntrack sees them, and
    asymmetric pod traffic (a SYN inside VXLAN, its SYN-ACK plain) looks INVALID there, which a
    kube-proxy-style `--ctstate INVALID -j DROP` on the host would drop: the underlay is not tracked."""
    return ["-t", "raw", "PREROUTING", "-i", bridge, "-m", "comment", "--comment", f"nodeagent lab {bridge}",
            "-j", "NOTRACK"]


def _make_network(topo: Topology, state: State) -> None:
    state.add("links", topo.bridge)
    _sh("ip", "link", "add", topo.bridge, "type", "bridge")
    state.add("notrack", topo.bridge)
    rule = _notrack_rule(topo.bridge)
    _sh("iptables", "-w", "5", rule[0], rule[1], "-I", *rule[2:])
    _sh("ip", "addr", "add", f"{topo.host_address}/24", "dev", topo.bridge)
    _sh("ip", "link", "set", topo.bridge, "up")
    for n in topo.nodes:
        state.add("netns", n.netns)
        _sh("ip", "netns", "add", n.netns)
        peer = f"{n.host_veth[:8]}p{n.index}"  # nl<tag>p<i>: renamed eth0 inside the node
        state.add("links", n.host_veth)
        _sh("ip", "link", "add", n.host_veth, "type", "veth", "peer", "name", peer)
        _sh("ip", "link", "set", peer, "netns", n.netns)
        _sh("ip", "-n", n.netns, "link", "set", peer, "name", "eth0")
        _sh("ip", "link", "set", n.host_veth, "master", topo.bridge, "up")
        _sh("ip", "-n", n.netns, "addr", "add", f"{n.address}/24", "dev", "eth0")
        _sh("ip", "-n", n.netns, "link", "set", "eth0", "up")
        _sh("ip", "-n", n.netns, "link", "set", "lo", "up")
        _sh("ip", "-n", n.netns, "route", "add", "default", "via", topo.host_address)
        for key in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv4.conf.default.rp_filter=0"):
            exec_in(n, "sysctl", "-qw", key)


def _api_get(kubeconfig: str, path: str) -> Any:
    cfg = yaml.safe_load(Path(kubeconfig).read_text())
    cluster, user = cfg["clusters"][0]["cluster"], cfg["users"][0]["user"]
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(cluster["server"] + path,
                                 headers={"Authorization": f"Bearer {user['token']}"})
    with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
        return json.loads(r.read())


def pod_cidrs(kubeconfig: str) -> dict[str, str]:
    """Each node's spec.podCIDR (assigned by the server's node IPAM, adopted by the node's agent)."""
    return {n["metadata"]["name"]: (n.get("spec") or {}).get("podCIDR") or ""
            for n in _api_get(kubeconfig, "/api/v1/nodes").get("items", [])}


def ready_nodes(kubeconfig: str) -> set[str]:
    out = set()
    for n in _api_get(kubeconfig, "/api/v1/nodes").get("items", []):
        for c in (n.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready" and c.get("status") == "True":
                out.add(n["metadata"]["name"])
    return out


def _wait(what: str, ok: Any, timeout: float, procs: dict[str, subprocess.Popen],
          logs: dict[str, Path]) -> None:
    end = time.monotonic() + timeout
    while True:
        for name, p in procs.items():
            if p.poll() is not None:
                tail = logs[name].read_text(errors="replace")[-3000:] if logs[name].exists() else ""
                raise LabError(f"{name} exited ({p.returncode}) while waiting for {what}:\n{tail}")
        try:
            if ok():
                return
        except (OSError, ValueError, KeyError):
            pass
        if time.monotonic() > end:
            raise LabError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.3)


KUBELET_CONFIG = "kubelet-config.yaml"  # in the lab dir: every agent's --config


def kubelet_config(node_monitor_grace_period: float) -> dict[str, Any]:
    """The agents' KubeletConfiguration: their node Lease lasts the server's grace period, so each renews it
    4 times within it, as kube's defaults pair them (40 s and 40 s). The kubelet's default 10 s renewal
    against a shorter grace lets a live node's heartbeat look older than the grace at a monitor pass."""
    return {"apiVersion": config_file.API_VERSION, "kind": config_file.KIND,
            "nodeLeaseDurationSeconds": max(1, int(node_monitor_grace_period))}


def up(lab_dir: str | Path, nodes: int = 2, network: str = "host-gw", images: Sequence[str] = (),
       node_monitor_grace_period: float = 40.0, timeout: float = 180.0, server_args: Sequence[str] = (),
       agent_args: Sequence[str] = ()) -> Topology:
    """Bring the lab up; returns once every node is Ready. On failure everything made so far is removed."""
    lab = Path(lab_dir).resolve()
    if (lab / STATE).exists():
        raise LabError(f"a lab already lives in {lab} (nodeagent lab down --dir {lab})")
    topo = topology(lab, nodes)
    lab.mkdir(parents=True, exist_ok=True)
    state = State(lab)
    state.data.update({"topology": {"nodes": nodes, "network": network}})
    state.save()
    try:
        _make_network(topo, state)
        if network == "ipip":  # refuse up front rather than start nodes whose tunnels cannot exist
            probe = exec_in(topo.nodes[0], "ip", "link", "add", "tunl0", "type", "ipip", check=False)
            if exec_in(topo.nodes[0], "ip", "link", "show", "tunl0", check=False).returncode != 0:
                raise LabError(f"--network ipip: this kernel has no ipip tunnels ({probe.stderr.strip()})")
        if network == "bgp" and not (shutil.which("bird") and shutil.which("birdc")):
            raise LabError("--network bgp: BIRD 2 is not installed (Debian's bird2; make install adds it)")
        py = [sys.executable, "-m", "nodeagent"]
        for n in topo.nodes:
            os.makedirs(n.data_dir, exist_ok=True)
            state.add("bind_dirs", str(Path(n.data_dir, ".host-cgroup")))
            layout = Layout.for_data_dir(n.data_dir)
            state.add("cgroup_roots", layout.cgroup_root)
            for archive in images:
                _sh(*py, "image", "--state-dir", layout.image_dir, "import", "--no-progress", archive)
        atomic_write(lab / KUBELET_CONFIG, yaml.safe_dump(kubelet_config(node_monitor_grace_period)))
        procs: dict[str, subprocess.Popen] = {}
        logs: dict[str, Path] = {}
        first = topo.nodes[0]
        os.makedirs(topo.server_dir, exist_ok=True)
        logs["server"] = Path(topo.server_dir, "server.log")
        procs["server"] = _start(state, "server", node_command(first, [
            *py, "server", "--data-dir", topo.server_dir, "--bind-address", first.address,
            "--port", str(API_PORT), "--datastore", "memory", "--pod-network", network,
            "--cluster-cidr", POD_CLUSTER_CIDR,
            "--node-monitor-grace-period", str(node_monitor_grace_period),
            *(() if "--service-lb-pool" in server_args else ("--service-lb-pool", topo.lb_pool)),
            *server_args]), logs["server"])
        _wait("the apiserver",
              lambda: Path(topo.kubeconfig).exists() and _api_get(topo.kubeconfig, "/version"),
              60, procs, logs)
        # Nodes join as `nodeagent server` tells them to: its bootstrap token, the CA pinned by hash.
        join_file = Path(topo.server_dir, "join-command")
        _wait("the join command", join_file.exists, 60, procs, logs)
        for n in topo.nodes:
            logs[n.name] = Path(n.data_dir, "agent.log")
            procs[n.name] = start_agent(topo, n, agent_args, state)
        want = {n.name for n in topo.nodes}
        _wait(f"{nodes} Ready nodes", lambda: want <= ready_nodes(topo.kubeconfig), timeout, procs, logs)
        return topo
    except BaseException:
        with contextlib.suppress(Exception):
            down(lab)
        raise


def start_agent(topo: Topology, node: NodeSpec, agent_args: Sequence[str] = (),
                state: State | None = None) -> subprocess.Popen:
    """The node's agent, joining with the server's join command (also to restart one that was stopped)."""
    state = state or State(Path(topo.lab_dir))
    join = Path(topo.server_dir, "join-command").read_text().split()
    config = Path(topo.lab_dir, KUBELET_CONFIG)
    token, ca_hash = join[join.index("--token") + 1], join[join.index("--ca-cert-hash") + 1]
    return _start(state, node.name, node_command(node, [
        sys.executable, "-m", "nodeagent", "agent", "--server", topo.server_url, "--token", token,
        "--ca-cert-hash", ca_hash, "--data-dir", node.data_dir, "--node-name", node.name,
        "--node-ip", node.address, *(("--config", str(config)) if config.exists() else ()), *agent_args]),
        Path(node.data_dir, "agent.log"))


def _kill_pid(pid: int, timeout: float) -> None:
    """SIGTERM, then SIGKILL after `timeout`; waits until the process is gone (or a zombie of someone
    else)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + timeout
    while _alive(pid):
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        if time.monotonic() > end:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            end = time.monotonic() + 10
            timeout = 0
        time.sleep(0.1)


def netns_pids(netns: str) -> list[int]:
    p = _sh("ip", "netns", "pids", netns, check=False)
    return [int(x) for x in p.stdout.split()] if p.returncode == 0 else []


def down(lab_dir: str | Path, timeout: float = 30.0) -> list[str]:
    """Stop every process, remove every netns, link, cgroup and file of the lab; returns what was left over
    and had to be forced (empty on a clean stop)."""
    lab = Path(lab_dir).resolve()
    if not (lab / STATE).exists():
        raise LabError(f"no lab in {lab}")
    state = State(lab)
    forced: list[str] = []
    pids = state.data["pids"]
    # agents first (they remove their pod network), the server last
    for name in sorted(pids, key=lambda n: n == "server"):
        _kill_pid(pids[name], timeout)
    for ns in state.data["netns"]:
        for pid in netns_pids(ns):
            forced.append(f"process {pid} in {ns}")
            _kill_pid(pid, 5)
    for root in state.data["cgroup_roots"]:
        kill_tree(root)
    for ns in state.data["netns"]:
        for pid in netns_pids(ns):  # a process that entered the node after the first pass
            _kill_pid(pid, 5)
        _sh("ip", "netns", "del", ns, check=False)
    for link in state.data["links"]:
        if Path("/sys/class/net", link).exists():
            _sh("ip", "link", "del", link, check=False)
    for bridge in state.data.get("notrack", []):
        rule = _notrack_rule(bridge)
        while _sh("iptables", "-w", "5", rule[0], rule[1], "-D", *rule[2:], check=False).returncode == 0:
            pass
    shutil.rmtree(lab, ignore_errors=True)
    return forced


def leftovers(lab_dir: str | Path, netns: list[str], links: list[str], cgroup_roots: list[str]) -> list[str]:
    """What of a lab still exists (for tests and `lab down`'s final check)."""
    out = []
    existing = set(_sh("ip", "netns", "list").stdout.split())
    out += [f"netns {n}" for n in netns if n in existing]
    out += [f"link {link}" for link in links if Path("/sys/class/net", link).exists()]
    out += [f"cgroup {d}" for r in cgroup_roots for d in tree_dirs(r)]
    raw = _sh("iptables", "-w", "5", "-t", "raw", "-S", "PREROUTING", check=False).stdout
    out += [f"iptables rule for {link}" for link in links if f"nodeagent lab {link}" in raw]
    if Path(lab_dir).exists():
        out.append(f"dir {lab_dir}")
    return out


def load(lab_dir: str | Path) -> dict[str, Any]:
    return json.loads(Path(lab_dir, STATE).read_text())

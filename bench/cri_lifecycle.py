#!/usr/bin/env python3
"""CRI lifecycle latency and per-pod memory: nodeagent's runtime vs containerd+runc, same client, same run.

For each pod: RunPodSandbox, PodSandboxStatus, CreateContainer, StartContainer, StopContainer,
RemoveContainer, StopPodSandbox, RemovePodSandbox, timed one by one through the CRI socket with the
project's client (p50/p99 per operation). Then density: N pods each running one `sleep`, and the host
memory each pod costs beyond the container's own process (PSS of pause + shim, plus the runtime
daemon's RSS growth divided by N). Pods get a network through Debian's reference bridge + host-local
CNI plugins for both runtimes, and ours is measured a second time with our own plugins (nodeagent-bridge,
-host-local, -portmap of this tree, installed in a private bin dir) on the resident `nodeagent cni-daemon`
fast path, as `nodeagent up` runs them. Run as root; the machine is shared, so figures are indicative.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import add_plot_argument, pct, plot_bars
from cri.client import CRIClient, container_config, sandbox_config

if TYPE_CHECKING:
    from tests.integration.cri.containerd import Containerd
    from tests.integration.cri.daemon import CRIDaemon

OPS = ["RunPodSandbox", "PodSandboxStatus", "CreateContainer", "StartContainer", "StopContainer",
       "RemoveContainer", "StopPodSandbox", "RemovePodSandbox"]
IMAGE = "localhost/busybox:latest"


def pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def conflist(root: Path, bridge: str, subnet: str) -> dict:
    return {"cniVersion": "0.4.0", "name": f"bench-{bridge}", "plugins": [
        {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False,
         "ipam": {"type": "host-local", "dataDir": str(root / "ipam"), "ranges": [[{"subnet": subnet}]]}},
        {"type": "loopback"}]}


OUR_CNI = "nodeagent+ourcni"  # our runtime with our CNI plugins through their daemon


class Target:
    """One runtime under test: started privately, with the busybox image and a CNI network."""

    def __init__(self, kind: str, root: Path, network: bool) -> None:
        self.kind, self.root, self.network = kind, root, network
        self.bridge = f"nbb{kind[:2]}{kind[-2:]}{os.getpid() % 10000}"
        self.d: CRIDaemon | Containerd | None = None
        self.cni_daemon: subprocess.Popen | None = None

    def start(self) -> CRIClient:
        from nodeagent.testing.images import ImageFactory

        factory = ImageFactory(self.root / "build")
        d: CRIDaemon | Containerd
        if self.kind.startswith("nodeagent"):
            from tests.integration.cri.daemon import CRIDaemon

            d = CRIDaemon(self.root)
            d.import_images([factory.busybox.docker_archive])
        else:
            from tests.integration.cri.containerd import Containerd

            d = Containerd(self.root)
        self.d = d
        d.cni_conf.mkdir(parents=True, exist_ok=True)
        if self.network and self.kind == OUR_CNI and isinstance(d, CRIDaemon):
            from cni.install import default_conflist, install

            bin_dir = self.root / "cni-bin"  # this tree's plugins, not whatever /opt/cni/bin holds now
            install(str(bin_dir), None)

            sock = str(self.root / "cni-plugin.sock")
            self.cni_daemon = subprocess.Popen(
                [sys.executable, "-m", "nodeagent", "cni-daemon", "--socket", sock],
                stdout=subprocess.DEVNULL, stderr=open(self.root / "cni.log", "ab"))
            deadline = time.monotonic() + 30
            while not os.path.exists(sock):
                if self.cni_daemon.poll() is not None or time.monotonic() > deadline:
                    said = (self.root / "cni.log").read_text()[-2000:]
                    raise RuntimeError(f"cni-daemon did not start: {said}")
                time.sleep(0.05)
            conf = default_conflist("10.243.0.0/16", self.bridge, str(self.root / "ipam"))
            conf["name"] = f"bench-{self.bridge}"
            (d.cni_conf / "10-bench.conflist").write_text(json.dumps(conf))
            d.cni_bin_dir = str(bin_dir)
            d.extra_args = ["--cni-socket", sock]
        elif self.network:
            subnet = "10.241.0.0/16" if self.kind == "nodeagent" else "10.242.0.0/16"
            conf = conflist(self.root, self.bridge, subnet)
            (d.cni_conf / "10-bench.conflist").write_text(json.dumps(conf))
        client = d.start()
        if self.kind == "containerd" and isinstance(d, Containerd):
            from cri.runtime.service import RuntimeOptions

            d.import_images(factory, RuntimeOptions(state_dir=self.root).pause, [])
        return client

    def daemon_pid(self) -> int:
        assert self.d is not None and self.d.proc is not None  # started
        return self.d.proc.pid

    def per_pod_pids(self, client: CRIClient, sid: str, cid: str) -> list[int]:
        """The processes a pod costs besides its container's own: pause and the shim(s)."""
        info = json.loads(client.pod_sandbox_status(sid, verbose=True).info.get("info", "{}"))
        pids = [info["pid"]] if info.get("pid") else []
        if self.kind.startswith("nodeagent"):
            pids.append(json.loads(client.container_status(cid, verbose=True).info["info"])["shimPid"])
        else:
            out = subprocess.run(["pgrep", "-f", f"containerd-shim-runc-v2 .*-id {sid}"],
                                 capture_output=True, text=True).stdout.split()
            pids += [int(x) for x in out]
        return pids

    def stop(self) -> None:
        if self.d is not None:
            if self.d.client is not None:
                for s in self.d.client.list_pod_sandbox():
                    try:
                        self.d.client.stop_pod_sandbox(s.id)
                        self.d.client.remove_pod_sandbox(s.id)
                    except Exception as e:  # keep cleaning
                        print(f"cleanup {s.id[:12]}: {e}", file=sys.stderr)
            self.d.stop()
        if self.cni_daemon is not None:
            self.cni_daemon.terminate()
            self.cni_daemon.wait(30)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)


def lifecycle(client: CRIClient, pods: int, parent: str, tmp: Path) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {op: [] for op in OPS}

    def timed(op, fn, *a):
        t0 = time.perf_counter()
        r = fn(*a)
        times[op].append((time.perf_counter() - t0) * 1000)
        return r

    for i in range(pods):
        scfg = sandbox_config(f"bench-{i}", uid=f"bench-uid-{i}", cgroup_parent=f"{parent}/pod{i}",
                              log_dir=str(tmp / "logs" / str(i)))
        sid = timed("RunPodSandbox", client.run_pod_sandbox, scfg)
        timed("PodSandboxStatus", client.pod_sandbox_status, sid)
        cid = timed("CreateContainer", client.create_container, sid,
                    container_config("sleeper", IMAGE, ["sleep", "3600"], log_path="sleeper/0.log"), scfg)
        timed("StartContainer", client.start_container, cid)
        timed("StopContainer", client.stop_container, cid, 0)
        timed("RemoveContainer", client.remove_container, cid)
        timed("StopPodSandbox", client.stop_pod_sandbox, sid)
        timed("RemovePodSandbox", client.remove_pod_sandbox, sid)
    return times


def density(target: Target, client: CRIClient, pods: int, parent: str, tmp: Path) -> dict[str, float]:
    daemon = target.daemon_pid()
    before = rss_kb(daemon)
    made = []
    for i in range(pods):
        scfg = sandbox_config(f"dense-{i}", uid=f"dense-uid-{i}", cgroup_parent=f"{parent}/dpod{i}",
                              log_dir=str(tmp / "dlogs" / str(i)))
        sid = client.run_pod_sandbox(scfg)
        ccfg = container_config("sleeper", IMAGE, ["sleep", "3600"], log_path="s/0.log")
        cid = client.create_container(sid, ccfg, scfg)
        client.start_container(cid)
        made.append((sid, cid))
    time.sleep(1)
    per_pod = [sum(pss_kb(p) for p in target.per_pod_pids(client, sid, cid)) for sid, cid in made]
    growth = max(0, rss_kb(daemon) - before)
    for sid, _ in made:
        client.stop_pod_sandbox(sid)
        client.remove_pod_sandbox(sid)
    return {"pods": pods, "pause_shim_pss_kib_per_pod": statistics.mean(per_pod) if per_pod else 0.0,
            "daemon_rss_growth_kib_per_pod": growth / pods if pods else 0.0}


def remove_parent(parent: str) -> None:
    from kernel.cgroups import hierarchies

    for r in hierarchies():  # every hierarchy: runc also uses the name=systemd one
        p = Path(r + parent)
        if p.exists():
            for dirpath, _, _ in sorted(os.walk(p), key=lambda t: -len(t[0])):
                try:
                    os.rmdir(dirpath)
                except OSError:
                    pass


def run_one(kind: str, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"bench-{kind}-") as tmp:
        root = Path(tmp)
        target = Target(kind, root, not args.no_network)
        parent = f"/nodeagent-bench-{kind}-{os.getpid()}"
        try:
            client = target.start()
            times = lifecycle(client, args.pods, parent, root)
            dens = density(target, client, args.pods, parent, root) if not args.no_density else {}
        finally:
            target.stop()
            remove_parent(parent)
    return {"times": times, "density": dens}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=100, help="pods per phase (default: 100)")
    ap.add_argument("--runtime", choices=["both", "nodeagent", OUR_CNI, "containerd"], default="both",
                    help=f"both: nodeagent, {OUR_CNI} and containerd (default)")
    ap.add_argument("--no-network", action="store_true", help="skip CNI (pods get no IP)")
    ap.add_argument("--no-density", action="store_true", help="skip the N-running-pods memory phase")
    ap.add_argument("--json", action="store_true", help="print raw results as JSON")
    add_plot_argument(ap)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (namespaces, cgroups, mounts)", file=sys.stderr)
        return 2
    kinds = ["nodeagent", OUR_CNI, "containerd"] if args.runtime == "both" else [args.runtime]
    if args.no_network and OUR_CNI in kinds and args.runtime == "both":
        kinds.remove(OUR_CNI)  # the same as "nodeagent" without a network
    results = {k: run_one(k, args) for k in kinds}
    if args.plot:
        plot_bars(args.plot, {op: {f"{k} {q}": pct(results[k]["times"][op], f) for k in kinds
                                   for q, f in (("p50", 0.5), ("p99", 0.99))} for op in OPS},
                  f"CRI lifecycle per operation, {args.pods} pods", "ms", logy=True)
        print(f"plot: {args.plot}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    load = os.getloadavg()[0]
    network = ("none" if args.no_network
               else f"bridge+host-local (Debian reference plugins); {OUR_CNI}: ours via cni-daemon")
    print(f"CRI lifecycle, {args.pods} pods, one container each, network: {network}"
          f"; load avg {load:.1f} on {os.cpu_count()} cores (shared machine)")
    head = f"{'operation':<20}" + "".join(f"{k + ' p50':>24}{k + ' p99':>24}" for k in kinds)
    print(head)
    for op in OPS:
        row = f"{op:<20}"
        for k in kinds:
            xs = results[k]["times"][op]
            row += f"{pct(xs, 0.5):>21.1f} ms{pct(xs, 0.99):>21.1f} ms"
        print(row)
    for k in kinds:
        t = results[k]["times"]
        both = [a + b for a, b in zip(t["CreateContainer"], t["StartContainer"], strict=True)]
        print(f"{k}: CreateContainer+StartContainer p50 {pct(both, 0.5):.1f} ms")
    for k in kinds:
        d = results[k]["density"]
        if d:
            pss, growth = d["pause_shim_pss_kib_per_pod"] / 1024, d["daemon_rss_growth_kib_per_pod"] / 1024
            print(f"{k}: per running pod at {d['pods']} pods: pause+shim PSS {pss:.2f} MiB, "
                  f"daemon RSS growth {growth:.3f} MiB (total {pss + growth:.2f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

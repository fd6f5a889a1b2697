#!/usr/bin/env python3
"""CNI ADD/DEL latency: nodeagent's plugins vs Debian's reference bridge + host-local, same run.

Every call execs the plugin binary exactly as a runtime does (CNI_* env, config on stdin,
DEL with the cached prevResult). Each implementation gets its own bridge, subnet, IPAM
dataDir and netns per pod; calls are interleaved pod by pod so load drifts hit all alike.
Implementations: `reference` (/usr/lib/cni bridge + host-local), `ours` (lean launcher +
resident `nodeagent cni-daemon`), `ours-nodaemon` (lean launcher, in-process fallback).
Run as root: .venv/bin/python bench/cni_add_del.py [--pods 100]
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report import add_plot_argument, latency_table, plot_cdf  # noqa: E402
from cni.install import install  # noqa: E402

REFERENCE_DIR = "/usr/lib/cni"
IMPLS = {
    "reference": ("bridge", "host-local"),
    "ours": ("nodeagent-bridge", "nodeagent-host-local"),
    "ours-nodaemon": ("nodeagent-bridge", "nodeagent-host-local"),
}


def free_subnets(n: int) -> list[str]:
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    out = []
    for third in range(0, 256):
        net = ipaddress.ip_network(f"10.237.{third}.0/24")
        if f" 10.237.{third}." not in used:
            out.append(str(net))
        if len(out) == n:
            return out
    raise SystemExit("no free 10.237.x.0/24 subnets")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=100, help="netns per implementation (default 100)")
    ap.add_argument("--impls", default="reference,ours,ours-nodaemon",
                    help="comma-separated subset of: " + ",".join(IMPLS))
    ap.add_argument("--version", default="1.0.0", help="cniVersion of the network config")
    add_plot_argument(ap)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root")
    impls = [i for i in args.impls.split(",") if i]
    for i in impls:
        if i not in IMPLS:
            raise SystemExit(f"unknown implementation {i}")

    work = Path(tempfile.mkdtemp(prefix="cnibench"))
    bindir = work / "bin"
    install(str(bindir), None, sys.executable)
    for name in os.listdir(REFERENCE_DIR):
        (bindir / name).symlink_to(os.path.join(REFERENCE_DIR, name))
    tag = f"{os.getpid() % 10000:04d}"
    subnets = free_subnets(len(impls))
    sock = str(work / "cni.sock")
    daemon = None
    if "ours" in impls:
        nodeagent = os.path.join(os.path.dirname(sys.executable), "nodeagent")
        daemon = subprocess.Popen([nodeagent, "cni-daemon", "--socket", sock])
        while not os.path.exists(sock):
            if daemon.poll() is not None:
                raise SystemExit("cni-daemon failed to start")
            time.sleep(0.05)

    confs, envs, netns = {}, {}, {}
    for k, impl in enumerate(impls):
        main_type, ipam_type = IMPLS[impl]
        confs[impl] = {"cniVersion": args.version, "name": f"bench{tag}{k}", "type": main_type,
                       "bridge": f"cb{tag}{k}", "isGateway": True, "ipMasq": True,
                       "ipam": {"type": ipam_type, "ranges": [[{"subnet": subnets[k]}]],
                                "dataDir": str(work / "ipam")}}
        envs[impl] = {"PATH": os.environ["PATH"], "CNI_PATH": str(bindir), "CNI_IFNAME": "eth0",
                      "NODEAGENT_CNI_SOCKET": sock if impl == "ours" else "none"}
        netns[impl] = [f"cb{tag}{k}n{i}" for i in range(args.pods)]
        for ns in netns[impl]:
            subprocess.run(["ip", "netns", "add", ns], check=True)

    def call(impl: str, cmd: str, i: int, prev: dict | None) -> tuple[float, dict | None]:
        conf = dict(confs[impl], prevResult=prev) if prev else confs[impl]
        env = dict(envs[impl], CNI_COMMAND=cmd, CNI_CONTAINERID=f"c{i}",
                   CNI_NETNS=f"/run/netns/{netns[impl][i]}")
        exe = str(bindir / confs[impl]["type"])
        t0 = time.perf_counter()
        p = subprocess.run([exe], input=json.dumps(conf).encode(), env=env, capture_output=True)
        dt = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(f"{impl} {cmd} c{i} failed: {p.stdout.decode()} {p.stderr.decode()}")
        return dt, (json.loads(p.stdout) if p.stdout.strip() else None)

    times: dict[str, dict[str, list[float]]] = {impl: {"ADD": [], "DEL": []} for impl in impls}
    results: dict[str, list] = {impl: [None] * args.pods for impl in impls}
    try:
        for i in range(args.pods):
            for impl in impls[i % len(impls):] + impls[:i % len(impls)]:
                dt, results[impl][i] = call(impl, "ADD", i, None)
                times[impl]["ADD"].append(dt)
        for i in range(args.pods):
            for impl in impls[i % len(impls):] + impls[:i % len(impls)]:
                dt, _ = call(impl, "DEL", i, results[impl][i])
                times[impl]["DEL"].append(dt)
    finally:
        for impl in impls:
            for i, ns in enumerate(netns[impl]):
                if results[impl][i] is not None and not times[impl]["DEL"][i:i + 1]:
                    env = dict(envs[impl], CNI_COMMAND="DEL", CNI_CONTAINERID=f"c{i}",
                               CNI_NETNS=f"/run/netns/{ns}")
                    subprocess.run([str(bindir / confs[impl]["type"])],
                                   input=json.dumps(confs[impl]).encode(), env=env, capture_output=True)
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            subprocess.run(["ip", "link", "del", confs[impl]["bridge"]], capture_output=True)
        if daemon:
            daemon.terminate()
            daemon.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)

    load = os.getloadavg()
    print(f"CNI ADD/DEL through the exec'd plugin, {args.pods} netns per implementation, cniVersion "
          f"{args.version}, isGateway+ipMasq, interleaved; load average {load[0]:.1f} {load[1]:.1f} on "
          f"{os.cpu_count()} CPUs (shared, busy machine)")
    rows = {f"{impl} {verb}": times[impl][verb] for impl in impls for verb in ("ADD", "DEL")}
    print(latency_table(rows))
    if args.plot:
        plot_cdf(args.plot, rows, f"CNI ADD/DEL through the exec'd plugin ({args.pods} netns each)")
        print(f"plot: {args.plot}")
    if "reference" in impls:
        for impl in impls:
            if impl == "reference":
                continue
            ra = statistics.median(times[impl]["ADD"]) / statistics.median(times["reference"]["ADD"])
            rd = statistics.median(times[impl]["DEL"]) / statistics.median(times["reference"]["DEL"])
            print(f"{impl} / reference p50: ADD {ra:.2f}x, DEL {rd:.2f}x (target <= 0.50x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

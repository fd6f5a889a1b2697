"""Every pod's cgroup files on a cgroup v2 node, as kubelet with runc writes them (the lab's Debian 12
guests; skipped on v1 hosts, where test_cpu_manager, test_node_allocatable and test_resources_kernel check
the v1 files).

One `up` with `--system-reserved memory=100Mi --enforce-node-allocatable pods` (and, with 2 CPUs or more, the
static CPU manager with `--reserved-cpus 0`) runs a Guaranteed, a Burstable and a BestEffort pod; then:
- the tree: kubepods (Guaranteed pods directly in it), kubepods/burstable, kubepods/besteffort, pod<uid>
  below its class, the container's own cgroup below its pod, holding the container's processes;
- kubepods: memory.max = capacity − system-reserved (allocatable enforcement; the eviction threshold is not
  taken off), cpu.weight from the allocatable CPUs' shares;
- the QoS cgroups: burstable's cpu.weight from the sum of its pods' CPU requests, besteffort's the minimum;
- each pod and container: cpu.weight (runc's shares → weight conversion), cpu.max (quota only with a CPU
  limit), memory.max (only when every container sets a memory limit), pids.max unlimited (no podPidsLimit),
  memory.min 0 and memory.high max (kubelet's MemoryQoS gate is off by default);
- the CPU manager: the Guaranteed container's cpuset.cpus is its exclusive CPU, the others' the shared pool.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nodeagent.api.quantity import parse_quantity
from tests.e2e.kubelet.test_node_up import BUSYBOX, Cluster, _running, _wait_runtime_empty
from tests.harness.resources import unique

# the lab's emulated guests take minutes for `up` alone (the 300 s default cut the first lab run short)
pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

Mi = 1 << 20
# Under the lab's software emulation everything is 10-20x slower than here.
WAIT = 600.0


def _weight(shares: int) -> int:
    """runc's cpu.shares [2, 262144] → cpu.weight [1, 10000] (ConvertCPUSharesToCgroupV2Value)."""
    return 1 + ((shares - 2) * 9999) // 262142


def _shares(milli: int) -> int:
    """kubelet's MilliCPUToShares: 1024 per CPU, at least 2."""
    return max(2, milli * 1024 // 1000)


def _pod(name: str, resources: dict[str, Any] | None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "app", "image": BUSYBOX, "imagePullPolicy": "Never",
                         "command": ["sleep", "3600"]}
    if resources:
        c["resources"] = resources
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [c]}}


def _files(d: Path) -> dict[str, str]:
    names = ("cpu.weight", "cpu.max", "memory.max", "memory.min", "memory.high", "pids.max")
    return {n: (d / n).read_text().strip() for n in names}


@pytest.fixture
def unified_root() -> Path:
    """The unified tree's mount point; the test is skipped (before any image is built) on other hosts."""
    from kernel.cgroups import detect_cgroups

    info = detect_cgroups()
    if info.version != "v2":
        pytest.skip(f"needs a cgroup v2 (unified) host; this one is {info.summary} "
                    "(test_cpu_manager, test_node_allocatable and test_resources_kernel check the v1 files)")
    assert info.v2_root
    missing = {"cpu", "cpuset", "memory", "pids"} - set(info.v2_controllers)
    if missing:
        pytest.skip(f"the unified tree lacks the {', '.join(sorted(missing))} controller(s)")
    return Path(info.v2_root)


def test_every_pods_cgroup_files_on_v2(unified_root, tmp_path, images):
    root = unified_root
    cpus = os.cpu_count() or 1
    cpu_manager = cpus >= 2
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(tmp_path / "images"),
                    "import", "--no-progress", str(images.busybox.docker_archive)], check=True,
                   capture_output=True)
    c = Cluster(tmp_path, unique("nd"), unique("kb"))
    c.ready_timeout = WAIT
    c.extra = ["--system-reserved", "memory=100Mi", "--enforce-node-allocatable", "pods"]
    if cpu_manager:
        c.extra += ["--cpu-manager-policy", "static", "--reserved-cpus", "0",
                    "--cpu-manager-reconcile-period", "1s"]
    g_cpu = "1" if cpu_manager else "250m"
    # on 2 CPUs with one reserved, the Guaranteed pod's CPU is all that is allocatable: the Burstable pod
    # then requests memory only (a CPU request would be refused at admission: OutOfcpu)
    b_milli = 0 if cpu_manager and cpus < 3 else 100
    b_requests = {"memory": "16Mi", **({"cpu": f"{b_milli}m"} if b_milli else {})}
    rc = 0
    try:
        c.start()
        c.apply(_pod("guaranteed", {"limits": {"cpu": g_cpu, "memory": "32Mi"}}))
        c.apply(_pod("burstable", {"requests": b_requests, "limits": {"memory": "64Mi"}}))
        c.apply(_pod("besteffort", None))
        pods = {n: c.wait_pod(n, _running, timeout=WAIT) for n in ("guaranteed", "burstable", "besteffort")}
        assert [pods[n]["status"]["qosClass"] for n in pods] == ["Guaranteed", "Burstable", "BestEffort"]
        node = json.loads(c.kubectl("get", "node", c.node, "-o", "json"))
        capacity = int(parse_quantity(node["status"]["capacity"]["memory"]))
        alloc_milli = int(parse_quantity(node["status"]["allocatable"]["cpu"]) * 1000)

        kubepods = root / c.cgroup_root().strip("/") / "kubepods"
        top = _files(kubepods)
        want_limit = capacity - 100 * Mi
        assert want_limit - 4096 < int(top["memory.max"]) <= want_limit, (top, want_limit)
        assert top["cpu.weight"] == str(_weight(_shares(alloc_milli))), top
        controllers = set((kubepods / "cgroup.subtree_control").read_text().split())
        assert {"cpu", "cpuset", "memory", "pids"} <= controllers, controllers

        # the QoS classes' own cgroups (burstable: the sum of its pods' CPU requests)
        assert (kubepods / "burstable" / "cpu.weight").read_text().strip() == str(_weight(_shares(b_milli)))
        assert (kubepods / "besteffort" / "cpu.weight").read_text().strip() == "1"

        unlimited = {"memory.min": "0", "memory.high": "max", "pids.max": "max"}
        g_milli = 1000 if cpu_manager else 250
        want = {
            "guaranteed": ("", {"cpu.weight": str(_weight(_shares(g_milli))),
                                "cpu.max": f"{g_milli * 100} 100000", "memory.max": str(32 * Mi),
                                **unlimited}),
            "burstable": ("burstable/", {"cpu.weight": str(_weight(_shares(b_milli))),
                                         "cpu.max": "max 100000", "memory.max": str(64 * Mi), **unlimited}),
            "besteffort": ("besteffort/", {"cpu.weight": "1", "cpu.max": "max 100000", "memory.max": "max",
                                           **unlimited}),
        }
        shared = "0" if cpus == 2 else f"0,2-{cpus - 1}"
        for name, (qos_dir, files) in want.items():
            p = pods[name]
            pod_dir = kubepods / f"{qos_dir}pod{p['metadata']['uid']}"
            assert _files(pod_dir) == files, (name, "pod", _files(pod_dir))
            cid = p["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
            ctr_dir = pod_dir / cid
            assert _files(ctr_dir) == files, (name, "container", _files(ctr_dir))
            assert (ctr_dir / "cgroup.procs").read_text().split(), f"{name}'s container cgroup is empty"
            if cpu_manager:
                cpuset = (ctr_dir / "cpuset.cpus").read_text().strip()
                end = time.monotonic() + WAIT  # the reconcile loop moves shared pods off the exclusive CPU
                while cpuset != ("1" if name == "guaranteed" else shared) and time.monotonic() < end:
                    time.sleep(1)
                    cpuset = (ctr_dir / "cpuset.cpus").read_text().strip()
                assert cpuset == ("1" if name == "guaranteed" else shared), (name, cpuset)
                assert (ctr_dir / "cpuset.cpus.effective").read_text().strip() == cpuset, name
    finally:
        if c.proc is not None and c.proc.poll() is None:
            c.kubectl("delete", "pods", "--all", "--wait=true", "--timeout=120s", check=False)
            _wait_runtime_empty(c, timeout=WAIT)
            rc = c.stop()
    assert rc == 0, c.tail()

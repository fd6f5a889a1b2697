"""The CPU manager's static policy on a real node (2 CPUs, `--reserved-cpus=0`): a Guaranteed 1-CPU pod
runs on CPU 1 alone and a BestEffort pod is moved to CPU 0 (CRI UpdateContainerResources), as the kernel
reports from inside each container and in the cgroup v1 files; the assignment is in `cpu_manager_state`
in kubelet's format and survives a restart of `up`; a pod that finds no free CPU is refused at admission
with kubelet's reason; releasing the CPU gives the shared pool back; a policy change over existing state
stops `up` with kubelet's message."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nodeagent.kubelet.cpumanager.state import Checkpoint
from nodeagent.layout import Layout
from tests.e2e.kubelet.test_node_up import (
    BUSYBOX,
    Cluster,
    _running,
    _wait_runtime_empty,
)
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


def _pod(name: str, cpu: str | None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "app", "image": BUSYBOX, "imagePullPolicy": "Never",
                         "command": ["sleep", "3600"]}
    if cpu:
        c["resources"] = {"limits": {"cpu": cpu, "memory": "32Mi"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [c]}}


def _allowed(c: Cluster, name: str) -> str:
    """Cpus_allowed_list of the container's own process: what the kernel lets it run on."""
    out = c.kubectl("exec", name, "--", "grep", "Cpus_allowed_list", "/proc/self/status")
    return out.split(":", 1)[1].strip()


def _wait_allowed(c: Cluster, name: str, want: str) -> None:
    end = time.monotonic() + 30
    while (got := _allowed(c, name)) != want:
        assert time.monotonic() < end, f"{name} runs on {got}, not {want}\n{c.tail()}"
        time.sleep(0.3)


def _cgroup_files(c: Cluster, pod: dict[str, Any], qos_dir: str) -> dict[str, str]:
    """The v1 files of the pod's app container (in its pod's cgroup, under the QoS class's)."""
    from kernel.cgroups import detect_cgroups

    ctl = detect_cgroups().v1_controllers
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    d = f"{c.cgroup_root()}/kubepods/{qos_dir}pod{pod['metadata']['uid']}/{cid}".lstrip("/")
    files = {"cpuset": "cpuset.cpus", "cpu": ("cpu.shares", "cpu.cfs_quota_us"),
             "memory": "memory.limit_in_bytes"}
    out = {}
    for ctrl, names in files.items():
        for name in (names,) if isinstance(names, str) else names:
            out[name] = Path(ctl[ctrl], d, name).read_text().strip()
    return out


def test_static_policy_gives_a_guaranteed_pod_its_own_cpu(tmp_path, images):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 CPUs (one reserved, one exclusive)")
    from kernel.cgroups import detect_cgroups

    v1 = detect_cgroups().version == "v1"
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(tmp_path / "images"),
                    "import", "--no-progress", str(images.busybox.docker_archive)], check=True,
                   capture_output=True)
    c = Cluster(tmp_path, unique("nd"), unique("kb"))
    c.extra = ["--cpu-manager-policy", "static", "--reserved-cpus", "0",
               "--cpu-manager-reconcile-period", "1s"]
    state_file = Path(Layout.for_data_dir(tmp_path).kubelet_root_dir, "cpu_manager_state")
    last = os.cpu_count() or 2
    everything = f"0-{last - 1}"
    rc = 0
    try:
        c.start()
        c.apply(_pod("besteffort", None))
        c.wait_pod("besteffort", _running)
        _wait_allowed(c, "besteffort", everything)
        c.apply(_pod("guaranteed", "1"))
        g = c.wait_pod("guaranteed", _running)
        assert g["status"]["qosClass"] == "Guaranteed"
        _wait_allowed(c, "guaranteed", "1")
        shared = "0" if last == 2 else f"0,2-{last - 1}"
        _wait_allowed(c, "besteffort", shared)  # the shared pool shrank for the running pod
        cp = Checkpoint.from_json(state_file.read_text())
        assert cp.policy_name == "static" and cp.default_cpu_set == shared
        assert cp.entries == {g["metadata"]["uid"]: {"app": "1"}}
        if v1:
            files = _cgroup_files(c, g, "")
            assert files == {"cpuset.cpus": "1", "cpu.shares": "1024", "cpu.cfs_quota_us": "100000",
                             "memory.limit_in_bytes": str(32 << 20)}, files
            be = _cgroup_files(c, c.pod("besteffort"), "besteffort/")
            assert be["cpuset.cpus"] == shared and be["cpu.shares"] == "2", be
            assert be["cpu.cfs_quota_us"] == "-1", be
            # the QoS cgroups (qosContainerManager): no Burstable pod, so burstable gets the minimum, not 1024
            kubepods = Path(detect_cgroups().v1_controllers["cpu"], c.cgroup_root().strip("/"), "kubepods")
            assert (kubepods / "burstable" / "cpu.shares").read_text().strip() == "2"
            assert (kubepods / "besteffort" / "cpu.shares").read_text().strip() == "2"

        assert c.stop() == 0  # the checkpoint outlives the kubelet
        c.start()
        _wait_allowed(c, "guaranteed", "1")
        if last == 2:  # no CPU left: refused at admission, as kubelet refuses it
            c.apply(_pod("second", "1"))
            st = c.wait_pod("second", lambda p: (p.get("status") or {}).get("phase") == "Failed")["status"]
            assert st["reason"] == "UnexpectedAdmissionError", st
            assert "not enough cpus available to satisfy request: requested=1, available=0" in st["message"]
            c.kubectl("delete", "pod", "second", "--wait=true", "--timeout=60s")

        c.kubectl("delete", "pod", "guaranteed", "--wait=true", "--timeout=60s")
        _wait_allowed(c, "besteffort", everything)  # the CPU went back to the shared pool
        assert Checkpoint.from_json(state_file.read_text()).entries == {}
        c.kubectl("delete", "pod", "besteffort", "--wait=true", "--timeout=60s")
        _wait_runtime_empty(c)
        assert c.stop() == 0

        # none over a static checkpoint: refused, as kubelet refuses a policy change without a drain
        c.extra = ["--cpu-manager-policy", "none"]
        with pytest.raises(AssertionError):
            c.start()
        assert c.proc is not None
        c.proc.wait(timeout=60)
        assert c.proc.returncode != 0
        assert 'configured policy "none" differs from state checkpoint policy "static"' in c.tail(200)
        c.proc = None
    finally:
        if c.proc is not None and c.proc.poll() is None:
            c.kubectl("delete", "pods", "--all", "--wait=true", "--timeout=60s", check=False)
            _wait_runtime_empty(c)
            rc = c.stop()
    assert rc == 0, c.tail()

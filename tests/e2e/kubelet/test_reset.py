"""`nodeagent reset` after a busy node (issue 18, item 5): `up` stopped with its pods still running (as
designed), then reset stops them through the runtime and nothing of the node is left: no pod process, no
cgroup, no bridge, no IPAM allocation, no CNI config; a second reset finds nothing and succeeds; reset
refuses while `up` runs, naming its pid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernel.cgroups import hierarchies
from nodeagent.layout import Layout
from tests.e2e.kubelet.test_node_up import BUSYBOX, Cluster
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


def _pod(name: str, qos: str) -> dict:
    resources = {"requests": {"cpu": "100m", "memory": "16Mi"}} if qos == "burstable" else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                     # a shell that ignores SIGTERM: the forced stop is needed
                                     "command": ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"],
                                     "resources": resources},
                                    {"name": "d", "image": BUSYBOX, "imagePullPolicy": "Never",
                                     "command": ["sleep", "3600"]}]}}


def reset(data_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodeagent", "reset", "--data-dir", str(data_dir),
                           "--grace-period", "1", *extra], capture_output=True, text=True, timeout=180)


def _pod_pids(c: Cluster) -> set[int]:
    from cri.client import CRIClient

    cri = CRIClient(str(c.data_dir / "cri.sock"), timeout=10)
    try:
        pids = set()
        for sb in cri.list_pod_sandbox():
            pids.add(json.loads(cri.pod_sandbox_status(sb.id, verbose=True).info["info"])["pid"])
            for ct in cri.list_containers(pod_sandbox_id=sb.id):
                pids.add(json.loads(cri.container_status(ct.id, verbose=True).info["info"])["pid"])
        return pids
    finally:
        cri.close()


def test_reset_after_a_busy_node_leaves_nothing(tmp_path, images):
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(tmp_path / "images"),
                    "import", "--no-progress", str(images.busybox.docker_archive)],
                   check=True, capture_output=True)
    c = Cluster(tmp_path, unique("nd"), unique("kb"))
    layout = Layout.for_data_dir(tmp_path)
    try:
        c.start()
        names = [("rs-burstable", "burstable"), ("rs-besteffort", "besteffort")]
        for name, qos in names:
            c.apply(_pod(name, qos))
        end = time.monotonic() + 90
        while True:
            phases = [json.loads(c.kubectl("get", "pod", n, "-o", "json"))["status"].get("phase")
                      for n, _ in names]
            if phases == ["Running", "Running"]:
                break
            assert time.monotonic() < end, (phases, c.tail())
            time.sleep(0.5)
        pids = _pod_pids(c)
        assert len(pids) == 6, pids  # two pause processes, four containers

        # `nodeagent status` shows this busy node: its process, its pods with their IPs and QoS classes
        status = subprocess.run([sys.executable, "-m", "nodeagent", "status", "--data-dir", str(tmp_path)],
                                capture_output=True, text=True, timeout=60,
                                env={**os.environ, "COLUMNS": "200"})
        assert status.returncode == 0, status.stdout + status.stderr
        assert c.proc is not None and f"running (pid {c.proc.pid})" in status.stdout, status.stdout
        for name, qos in names:
            pod = json.loads(c.kubectl("get", "pod", name, "-o", "json"))
            row = next(ln for ln in status.stdout.splitlines() if f" {name} " in ln)
            assert pod["status"]["podIP"] in row, (row, pod["status"])
            assert {"burstable": "Burstable", "besteffort": "BestEffort"}[qos] in row, row
        assert "MemoryPressure" in status.stdout and "KUBE-SVC" in status.stdout

        refused = reset(tmp_path)
        assert refused.returncode == 1, refused
        assert c.proc is not None and f"pid {c.proc.pid}" in refused.stderr, refused.stderr
        assert all(Path(f"/proc/{p}").exists() for p in pids), "a refused reset stopped pods"
    finally:
        rc = c.stop()
    assert rc == 0, c.tail()
    assert all(Path(f"/proc/{p}").exists() for p in pids), "pods are to outlive `up`"
    assert Path(f"/sys/class/net/{c.bridge}").exists()

    done = reset(tmp_path)  # the bridge `up --bridge` chose, found in the node's CNI config
    assert done.returncode == 0, done.stderr + done.stdout
    assert "2 pod(s) stopped and removed" in done.stdout, done.stdout
    alive = [p for p in pids if Path(f"/proc/{p}").exists()
             and Path(f"/proc/{p}/stat").read_text().split()[2] != "Z"]
    assert not alive, f"pod processes outlived reset: {alive}"
    assert not Path(f"/sys/class/net/{c.bridge}").exists(), "the pod bridge outlived reset"
    assert not any(Path(m, layout.cgroup_root).exists() for m in hierarchies()), "the cgroup root outlived it"
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    assert layout.netpol_chain_prefix not in rules, "NetworkPolicy chains outlived reset"
    assert f"net={layout.network_name} " not in rules, "the pod network's masquerade rules outlived reset"
    assert not Path(layout.cni_ipam_dir, layout.network_name).exists(), "IPAM allocations outlived reset"
    assert not list(Path(layout.cni_conf_dir).glob("*.conflist")), "the CNI config outlived reset"
    assert not list(Path(layout.cri_state_dir).glob("sandboxes/*")), "sandbox state outlived reset"
    assert str(tmp_path) not in Path("/proc/mounts").read_text(), "a mount outlived reset"
    assert tmp_path.exists(), "without --all the data dir stays"

    again = reset(tmp_path, "--bridge", c.bridge)
    assert again.returncode == 0 and "0 pod(s)" in again.stdout, again.stderr + again.stdout

    everything = reset(tmp_path, "--bridge", c.bridge, "--all")
    assert everything.returncode == 0, everything.stderr
    assert not tmp_path.exists(), "--all leaves the data dir"
    tmp_path.mkdir()  # pytest's own cleanup expects it

"""The container manager's numbers against a real cgroup v1 hierarchy, and the v2 files against the unified
tree where the host has one (the lab's guests): the kernel takes them as computed.

The module itself never writes cgroups (the runtime's driver does); this proves the values are ones the
kernel accepts and reads back unchanged, and that the working-set reader works on a live cgroup.
"""

import errno
import subprocess
import time
from pathlib import Path

import pytest

from nodeagent.kubelet import resources as r
from nodeagent.kubelet.eviction.signals import cgroup_working_set
from tests.unit.kubelet.podspecs import container, pod

pytestmark = pytest.mark.root


def write_config(paths: dict, cfg: r.ResourceConfig) -> None:
    for fname, value in cfg.v1_files().items():
        ctrl = "cpu" if fname.startswith("cpu.") else "memory"
        Path(paths[ctrl], fname).write_text(value)


def read(paths: dict, ctrl: str, fname: str) -> str:
    return Path(paths[ctrl], fname).read_text().strip()


@pytest.fixture
def cg(res):
    paths = res.cgroup()
    if "cpu" not in paths or "memory" not in paths:
        pytest.skip("needs the cgroup v1 cpu and memory hierarchies (this test covers the v1 files)")
    return paths


@pytest.mark.parametrize("spec,shares,quota,mem", [
    (dict(limits={"cpu": "250m", "memory": "64Mi"}), "256", "25000", str(64 << 20)),      # Guaranteed
    (dict(requests={"cpu": "10m"}, limits={"memory": "32Mi"}), "10", "-1", str(32 << 20)),  # Burstable
    ({}, "2", "-1", None),                                                                    # BestEffort
])
def test_pod_config_is_accepted_by_the_kernel(cg, spec, shares, quota, mem):
    cfg = r.pod_resource_config(pod(container(**spec)))
    write_config(cg, cfg)
    assert read(cg, "cpu", "cpu.shares") == shares
    assert read(cg, "cpu", "cpu.cfs_quota_us") == quota
    if mem is not None:
        assert read(cg, "memory", "memory.limit_in_bytes") == mem


def test_min_quota_is_the_kernels_floor(cg):
    Path(cg["cpu"], "cpu.cfs_period_us").write_text(str(r.QUOTA_PERIOD_US))
    Path(cg["cpu"], "cpu.cfs_quota_us").write_text(str(r.milli_cpu_to_quota(1)))
    assert read(cg, "cpu", "cpu.cfs_quota_us") == "1000"
    with pytest.raises(OSError) as ei:
        Path(cg["cpu"], "cpu.cfs_quota_us").write_text("999")
    assert ei.value.errno == errno.EINVAL
    Path(cg["cpu"], "cpu.shares").write_text(str(r.milli_cpu_to_shares(0)))
    assert read(cg, "cpu", "cpu.shares") == "2"


def test_working_set_of_a_live_cgroup(cg, res):
    proc = res.process(["sleep", "30"])
    Path(cg["memory"], "cgroup.procs").write_text(str(proc.pid))
    ws = cgroup_working_set(cg["memory"])
    usage = int(read(cg, "memory", "memory.usage_in_bytes"))
    assert 0 <= ws <= usage


@pytest.fixture
def cg2(res):
    paths = res.cgroup()
    if "unified" not in paths:
        pytest.skip("needs cgroup v2 (unified); the v1 files are checked by the tests above")
    d = paths["unified"]
    enabled = set((d.parent / "cgroup.subtree_control").read_text().split())
    if not {"cpu", "memory"} <= enabled:
        pytest.skip(f"the cpu and memory controllers are not enabled below {d.parent} ({enabled})")
    return d


@pytest.mark.parametrize("spec,weight,cpu_max,mem", [
    (dict(limits={"cpu": "250m", "memory": "64Mi"}), "10", "25000 100000", str(64 << 20)),   # Guaranteed
    (dict(requests={"cpu": "10m"}, limits={"memory": "32Mi"}), "1", "max 100000", str(32 << 20)),  # Burstable
    ({}, "1", "max 100000", "max"),                                                           # BestEffort
])
def test_pod_config_v2_files_are_accepted_by_the_kernel(cg2, spec, weight, cpu_max, mem):
    """cpu.weight by runc's conversion of the shares (256 → 10, 10 and 2 → 1), cpu.max, memory.max."""
    for fname, value in r.pod_resource_config(pod(container(**spec))).v2_files().items():
        (cg2 / fname).write_text(value)
    assert (cg2 / "cpu.weight").read_text().strip() == weight
    assert (cg2 / "cpu.max").read_text().strip() == cpu_max
    assert (cg2 / "memory.max").read_text().strip() == mem


def test_working_set_of_a_live_v2_cgroup(cg2, res):
    proc = res.process(["sleep", "30"])
    (cg2 / "cgroup.procs").write_text(str(proc.pid))
    ws = cgroup_working_set(cg2)
    assert 0 <= ws <= int((cg2 / "memory.current").read_text())


def test_raising_oom_score_adj_for_burstable_and_besteffort(res):
    """Raising a process's oom_score_adj needs no privilege; the values come from oom_score_adj()."""
    b = container(requests={"memory": "1Gi"})
    be = container()
    values = [r.oom_score_adj(pod(b), b, 4 << 30), r.oom_score_adj(pod(be), be, 4 << 30)]
    assert values == [750, 1000]
    for v in values:
        proc = res.process(["sh", "-c", f"echo {v} > /proc/self/oom_score_adj && exec sleep 30"],
                           stdout=subprocess.DEVNULL)
        for _ in range(500):  # until sh has exec'd sleep (the write happened before)
            if Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"sleep"):
                break
            time.sleep(0.01)
        assert Path(f"/proc/{proc.pid}/oom_score_adj").read_text().strip() == str(v)

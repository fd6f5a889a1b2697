"""The cgroup drivers' file writes, checked against a fake cgroupfs tree (plain files, no kernel)."""

from __future__ import annotations

from pathlib import Path

from kernel.cgroups.base import Resources
from kernel.cgroups.v1 import V1Cgroups
from kernel.cgroups.v2 import V2Cgroups


def test_v2_create_enables_controllers_and_applies_limits(tmp_path):
    root = tmp_path / "unified"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    cg = V2Cgroups(str(root))
    made = cg.create("/kubepods/pod1")
    assert made == ["/kubepods", "/kubepods/pod1"]
    assert (root / "cgroup.subtree_control").read_text() == "+cpu +cpuset +memory +pids +io"
    d = root / "kubepods/pod1"
    cg.apply("/kubepods/pod1", Resources(cpu_period=100000, cpu_quota=50000, cpu_shares=1024,
                                         memory_limit=64 << 20, pids_limit=42,
                                         unified=(("io.weight", "50"),)))
    assert (d / "cpu.max").read_text() == "50000 100000"
    assert (d / "cpu.weight").read_text() == "39"  # 1 + (1024-2)*9999/262142, as runc converts
    assert (d / "memory.max").read_text() == str(64 << 20)
    assert (d / "pids.max").read_text() == "42"
    assert (d / "io.weight").read_text() == "50"
    assert cg.procs_files("/kubepods/pod1") == [str(d / "cgroup.procs")]
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert cg.oom_kills("/kubepods/pod1") == 1


def test_v1_limits_go_through_cgroupspy_to_each_hierarchy(tmp_path):
    mounts = {}
    for ctrl in ("cpu", "cpuacct", "cpuset", "memory", "pids"):
        d = tmp_path / ctrl
        d.mkdir()
        mounts[ctrl] = str(d)
    (tmp_path / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    (tmp_path / "cpuset" / "cpuset.mems").write_text("0\n")
    cg = V1Cgroups(mounts)
    assert cg.create("/pods/a") == ["/pods", "/pods/a"]
    assert (tmp_path / "cpuset/pods/a/cpuset.cpus").read_text() == "0-1"  # inherited so tasks can join
    cg.apply("/pods/a", Resources(cpu_period=100000, cpu_quota=20000, cpu_shares=256, memory_limit=32 << 20,
                                  pids_limit=7, cpuset_cpus="1"))
    assert (tmp_path / "cpu/pods/a/cpu.cfs_quota_us").read_text() == "20000"
    assert (tmp_path / "cpu/pods/a/cpu.cfs_period_us").read_text() == "100000"
    assert (tmp_path / "cpu/pods/a/cpu.shares").read_text() == "256"
    assert (tmp_path / "memory/pods/a/memory.limit_in_bytes").read_text() == str(32 << 20)
    assert (tmp_path / "pids/pods/a/pids.max").read_text() == "7"
    assert (tmp_path / "cpuset/pods/a/cpuset.cpus").read_text() == "1"
    assert len(cg.procs_files("/pods/a")) == 5
    oom_control = Path(tmp_path / "memory/pods/a/memory.oom_control")
    oom_control.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert cg.oom_kills("/pods/a") == 2


def test_v1_create_fills_every_empty_cpuset_level_once_and_again_after_removal(tmp_path):
    mounts = {}
    for ctrl in ("cpu", "cpuset", "memory"):
        (tmp_path / ctrl).mkdir()
        mounts[ctrl] = str(tmp_path / ctrl)
    (tmp_path / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    (tmp_path / "cpuset" / "cpuset.mems").write_text("0\n")
    (tmp_path / "cpuset" / "kubepods").mkdir()  # made by another creator, not filled in yet
    (tmp_path / "memory" / "kubepods").mkdir()
    cg = V1Cgroups(mounts)
    assert cg.create("/kubepods/pod1/c1") == ["/kubepods", "/kubepods/pod1", "/kubepods/pod1/c1"]
    for level in ("kubepods", "kubepods/pod1", "kubepods/pod1/c1"):
        assert (tmp_path / "cpuset" / level / "cpuset.cpus").read_text() == "0-1"
        assert (tmp_path / "cpuset" / level / "cpuset.mems").read_text() == "0"
    assert cg.create("/kubepods/pod1/c2") == ["/kubepods/pod1/c2"]  # under existing parents
    assert (tmp_path / "cpuset/kubepods/pod1/c2/cpuset.cpus").read_text() == "0-1"
    assert cg.create("/kubepods/pod1/c2") == []
    for f in ("cpuset.cpus", "cpuset.mems"):  # a plain tree: rmdir needs the files gone, as cgroupfs does not
        (tmp_path / "cpuset/kubepods/pod1/c2" / f).unlink()
    cg.remove("/kubepods/pod1/c2")
    assert not (tmp_path / "cpu/kubepods/pod1/c2").exists()
    assert cg.create("/kubepods/pod1/c2") == ["/kubepods/pod1/c2"]
    assert (tmp_path / "cpuset/kubepods/pod1/c2/cpuset.cpus").read_text() == "0-1"

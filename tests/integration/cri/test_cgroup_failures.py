"""Sandbox creation against awkward cgroup states on the real kernel (v1 cpuset):
nothing half-made survives."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cri.runtime.errors import FailedPrecondition
from cri.runtime.sandboxes import _join_cgroup, _start_pause
from cri.runtime.service import RuntimeOptions
from kernel.cgroups import detect_cgroups
from tests.harness.resources import remove_cgroup, unique

pytestmark = pytest.mark.root


def _cpuset_root() -> Path:
    info = detect_cgroups()
    if info.version != "v1" or "cpuset" not in info.v1_controllers:
        pytest.skip("needs a v1 cpuset hierarchy")
    return Path(info.v1_controllers["cpuset"])


def _pids_with_arg(arg: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", arg], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out if int(p) != os.getpid()]


def test_pause_does_not_outlive_a_failed_cgroup_join():
    """Joining a v1 cpuset cgroup whose cpuset.cpus is empty fails with ENOSPC: the pause process goes too."""
    root = _cpuset_root()
    empty = root / unique("cg")
    empty.mkdir()  # a fresh v1 cpuset child: cpus and mems empty, the kernel refuses tasks
    host = unique("pz")
    try:
        assert not (empty / "cpuset.cpus").read_text().strip()
        with pytest.raises(FailedPrecondition, match="could not join its cgroup"):
            pid, _ = _start_pause([RuntimeOptions(Path("/nonexistent")).pause, "-u", "-H", host])
            _join_cgroup(pid, [str(empty / "cgroup.procs")])
        assert _pids_with_arg(f"-H {host}") == []
        assert not (empty / "cgroup.procs").read_text().split()
    finally:
        remove_cgroup(empty)
    assert not empty.exists()


def test_sandbox_under_a_parent_another_pod_has_not_filled_yet(cri, pods):
    """Two pods making one cpuset parent at once: the second finds it made but still empty (the first has
    not copied cpus/mems in yet). Its sandbox must still start, with cpus/mems filled along the path."""
    root = _cpuset_root()
    cfg = pods.config()
    parent = root / cfg.linux.cgroup_parent.lstrip("/")
    parent.mkdir()  # the other creator's half-made parent
    assert not (parent / "cpuset.cpus").read_text().strip()
    sid, _ = pods.run(cfg)
    want = (root / "cpuset.cpus").read_text().strip()
    assert (parent / "cpuset.cpus").read_text().strip() == want
    assert (parent / sid / "cpuset.cpus").read_text().strip() == want
    pause = [int(p) for p in (parent / sid / "cgroup.procs").read_text().split()]
    assert len(pause) == 1

"""Observing eviction signals on the host, computed the way the kubelet computes them.

- memory.available = MemTotal − working set of the root cgroup, where working set = usage − inactive_file
  (cgroup v1: memory.usage_in_bytes and total_inactive_file; v2, whose root has no memory.current:
  MemTotal − MemFree as usage and inactive_file from the root memory.stat).
- allocatableMemory.available = allocatable memory − working set of the `kubepods` cgroup.
- nodefs.available / nodefs.inodesFree (and imagefs.*) from statvfs of the filesystem's directory.
- pid.available = min(kernel.pid_max, kernel.threads-max) − number of tasks (/proc/loadavg).
All readers take their root directories so tests can point them at fixtures.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path

from nodeagent.kubelet.eviction import thresholds as th


@dataclasses.dataclass(frozen=True)
class Observation:
    available: Fraction
    capacity: Fraction


Observations = dict[str, Observation]


def read_meminfo(proc: Path = Path("/proc")) -> dict[str, int]:
    """/proc/meminfo in bytes."""
    out = {}
    for line in (proc / "meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            out[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


def _read_stat(path: Path) -> dict[str, int]:
    out = {}
    for line in path.read_text().splitlines():
        k, _, v = line.partition(" ")
        if v.strip().lstrip("-").isdigit():
            out[k] = int(v)
    return out


def working_set(usage: int, inactive_file: int) -> int:
    """cadvisor's working set: usage minus inactive file cache, never negative."""
    return max(0, usage - inactive_file)


def cgroup_working_set(cgroup_dir: Path) -> int:
    """Working set of one cgroup directory (v1 memory controller dir or v2 unified dir)."""
    v1_usage = cgroup_dir / "memory.usage_in_bytes"
    if v1_usage.exists():
        stat = _read_stat(cgroup_dir / "memory.stat")
        return working_set(int(v1_usage.read_text()), stat.get("total_inactive_file", 0))
    stat = _read_stat(cgroup_dir / "memory.stat")
    return working_set(int((cgroup_dir / "memory.current").read_text()), stat.get("inactive_file", 0))


def memory_root() -> Path | None:
    """The host's memory controller root (kernel.cgroups' detection: the v1 memory hierarchy or the
    unified root)."""
    from kernel.cgroups import detect_cgroups

    root = detect_cgroups().memory_root
    return Path(root) if root else None


def observe_memory(proc: Path = Path("/proc"), memory: Path | None = None) -> Observation:
    """memory.available for the node; `memory`: the memory controller's root (default: this host's)."""
    info = read_meminfo(proc)
    capacity = info["MemTotal"]
    root = memory if memory is not None else memory_root()
    if root is not None and (root / "memory.usage_in_bytes").exists():  # v1
        ws = cgroup_working_set(root)
    else:  # v2, whose root has no memory.current: MemTotal − MemFree is the usage
        stat = root / "memory.stat" if root is not None else None
        inactive = _read_stat(stat).get("inactive_file", 0) if stat is not None and stat.exists() else 0
        ws = working_set(capacity - info.get("MemFree", 0), inactive)
    return Observation(Fraction(capacity - ws), Fraction(capacity))


def observe_allocatable_memory(kubepods_dir: Path, allocatable_memory: int) -> Observation:
    """allocatableMemory.available: allocatable minus what the pods' cgroup holds."""
    return Observation(Fraction(allocatable_memory - cgroup_working_set(kubepods_dir)),
                       Fraction(allocatable_memory))


def observe_fs(path: str | os.PathLike) -> tuple[Observation, Observation]:
    """(bytes available, inodes free) of the filesystem holding `path`."""
    st = os.statvfs(path)
    return (Observation(Fraction(st.f_bavail * st.f_frsize), Fraction(st.f_blocks * st.f_frsize)),
            Observation(Fraction(st.f_ffree), Fraction(st.f_files)))


def observe_pids(proc: Path = Path("/proc")) -> Observation:
    pid_max = int((proc / "sys/kernel/pid_max").read_text())
    threads_max_path = proc / "sys/kernel/threads-max"
    max_pid = min(pid_max, int(threads_max_path.read_text())) if threads_max_path.exists() else pid_max
    running = int((proc / "loadavg").read_text().split()[3].split("/")[1])
    return Observation(Fraction(max_pid - running), Fraction(max_pid))


def observe(nodefs: str | os.PathLike, imagefs: str | os.PathLike | None = None,
            kubepods_dir: Path | None = None, allocatable_memory: int | None = None,
            proc: Path = Path("/proc"), memory: Path | None = None) -> Observations:
    """Every signal this host can report (blocking file reads: call from a thread)."""
    obs: Observations = {th.MEMORY_AVAILABLE: observe_memory(proc, memory)}
    if kubepods_dir is not None and allocatable_memory is not None and kubepods_dir.exists():
        obs[th.ALLOCATABLE_MEMORY_AVAILABLE] = observe_allocatable_memory(kubepods_dir, allocatable_memory)
    obs[th.NODEFS_AVAILABLE], obs[th.NODEFS_INODES_FREE] = observe_fs(nodefs)
    img = imagefs if imagefs is not None else nodefs
    obs[th.IMAGEFS_AVAILABLE], obs[th.IMAGEFS_INODES_FREE] = observe_fs(img)
    obs[th.PID_AVAILABLE] = observe_pids(proc)
    return obs


def observations_from(values: Mapping[str, tuple[int, int]]) -> Observations:
    """Build observations from {signal: (available, capacity)} (tests, benchmarks, stats summary)."""
    return {k: Observation(Fraction(a), Fraction(c)) for k, (a, c) in values.items()}

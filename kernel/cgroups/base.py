"""The cgroup interface the runtime uses; v1 and v2 drivers implement it.

Paths are cgroupfs-style and absolute within the hierarchy ("/kubepods/besteffort/pod<uid>/<id>"),
the same string kubelet passes as cgroup_parent, whatever the version.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol


@dataclasses.dataclass(frozen=True)
class Resources:
    """LinuxContainerResources, with 0/"" meaning "not set" as in the CRI."""

    cpu_period: int = 0
    cpu_quota: int = 0
    cpu_shares: int = 0
    memory_limit: int = 0
    memory_swap_limit: int = 0
    cpuset_cpus: str = ""
    cpuset_mems: str = ""
    pids_limit: int = 0
    unified: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Stats:
    cpu_usage_ns: int = 0
    memory_usage: int = 0
    memory_working_set: int = 0
    memory_rss: int = 0
    memory_limit: int = 0
    page_faults: int = 0
    major_page_faults: int = 0
    pids: int = 0
    # what cAdvisor reports beyond the summary's fields
    cpu_user_ns: int = 0
    cpu_system_ns: int = 0
    cfs_periods: int = 0
    cfs_throttled_periods: int = 0
    cfs_throttled_ns: int = 0
    memory_cache: int = 0
    io_read_bytes: int = 0
    io_write_bytes: int = 0


class Cgroups(Protocol):
    version: str

    def create(self, path: str) -> list[str]:
        """Make the cgroup (and missing parents) in every hierarchy; return the paths made, top first."""

    def apply(self, path: str, res: Resources) -> None: ...

    def procs_files(self, path: str) -> list[str]:
        """The cgroup.procs files a process writes its pid to, to join the cgroup."""

    def pids(self, path: str) -> list[int]: ...

    def stats(self, path: str, detail: bool = False) -> Stats:
        """Usage counters; `detail` also reads user/system CPU, CFS throttling, page cache and io bytes
        (cAdvisor's extra series: more files per call than the CRI stats need)."""

    def oom_kills(self, path: str) -> int:
        """How many processes the OOM killer killed in this cgroup."""

    def remove(self, path: str) -> None:
        """Remove the cgroup in every hierarchy; gone already is fine."""

    def exists(self, path: str) -> bool: ...

    def restrict_devices(self, path: str, allow: list[str]) -> None:
        """Limit device access to these rules ("c 1:3 rwm"); drivers without support do nothing."""

    def warm_attach(self) -> None:
        """Start the RCU grace period the next cgroup attach would wait for (base.warm_attach)."""


def rmdir_retry(p: Path, budget_s: float = 10.0) -> None:
    """rmdir a cgroup directory, retrying while the kernel still counts exiting tasks (EBUSY).

    The wait starts at 0.5 ms and doubles up to 50 ms: a task that was just killed is usually gone
    within a millisecond or two, so a coarse first sleep would dominate RemoveContainer."""
    delay, deadline = 0.0005, time.monotonic() + budget_s
    while True:
        try:
            p.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def write(p: Path, value: str) -> None:
    # O_CREAT is a no-op on cgroupfs (its files always exist) and lets tests use a plain directory tree.
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def read_int(p: Path, default: int = 0) -> int:
    with contextlib.suppress(OSError, ValueError):
        return int(p.read_text().split()[0])
    return default


def read_kv(p: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in p.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                with contextlib.suppress(ValueError):
                    out[parts[0]] = int(parts[1])
    return out


def norm(path: str) -> str:
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    return "/" + "/".join(parts)


def warm_attach(own_file: Callable[[str], str | None]) -> None:
    """Move this worker thread into its own cgroup: a no-op move that still takes the attach lock.

    Why: every write to a cgroup.procs (or tasks) file takes the kernel's global
    cgroup_threadgroup_rwsem for writing; when no attach happened within the last RCU grace period,
    that first waits a whole grace period (measured 3-15 ms on a 2-core machine, the longer under
    load); attaches right after are quick. Done on a worker thread as an operation begins, the wait
    overlaps the operation's other work instead of delaying the container's (or pause's) own attach.

    `own_file(cgroup_line)` maps a line of /proc/thread-self/cgroup to the file to write our tid
    (v1 `tasks`) or pid (v2 `cgroup.procs`) to, or None. Read each time: a cached path would move
    us back if someone moved the daemon meanwhile. Best effort: errors are ignored."""
    with contextlib.suppress(OSError):
        with open("/proc/thread-self/cgroup") as f:
            for line in f:
                target = own_file(line.rstrip("\n"))
                if target:
                    who = threading.get_native_id() if target.endswith("/tasks") else os.getpid()
                    write(Path(target), str(who))
                    return

"""cgroup v1 driver: one directory per hierarchy, limits and stats through cgroupspy's controllers."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from cgroupspy import controllers as cc
from cgroupspy.nodes import Node

from kernel.cgroups.base import (
    Resources,
    Stats,
    norm,
    read_int,
    read_kv,
    rmdir_retry,
    warm_attach,
    write,
)

# The hierarchies a pod or container joins; others (freezer, blkio) are left to the parent.
MANAGED = ("cpu", "cpuacct", "cpuset", "memory", "pids", "devices")
_CONTROLLER_CLASSES = {
    "cpu": cc.CpuController,
    "cpuacct": cc.CpuAcctController,
    "cpuset": cc.CpuSetController,
    "memory": cc.MemoryController,
}


class V1Cgroups:
    version = "v1"

    def __init__(self, mounts: dict[str, str]) -> None:
        # controller -> mount point; co-mounted controllers (cpu,cpuacct) share a directory.
        self.mounts = {c: m for c, m in mounts.items() if c in MANAGED}
        self._dirs = sorted(set(self.mounts.values()))
        self._filled: dict[str, int] = {}  # cpuset directory -> its inode, once seen filled

    # -- paths -----------------------------------------------------------------------------------
    def _dir(self, ctrl: str, path: str) -> Path:
        return Path(self.mounts[ctrl] + norm(path))

    def _node(self, ctrl: str, path: str) -> Node:
        """A cgroupspy node for `path` in the hierarchy of `ctrl`, without scanning the tree."""
        mount = self.mounts[ctrl]
        root = Node(os.path.dirname(mount).encode())
        top = Node(os.path.basename(mount).encode(), parent=root)
        top.controller_type = ctrl.encode()
        top.controller = _CONTROLLER_CLASSES[ctrl](top)
        node = top
        for part in norm(path).strip("/").split("/"):
            if part:
                node = Node(part.encode(), parent=node)
        return node

    # -- lifecycle -------------------------------------------------------------------------------
    def create(self, path: str) -> list[str]:
        """Make `path` and its missing parents in every hierarchy; returns the levels made (top first)."""
        path = norm(path)
        parts = path.strip("/").split("/")
        levels = ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        made: set[str] = set()
        cpuset = self.mounts.get("cpuset")
        fresh: list[str] = []
        for d in self._dirs:
            here = _make_dirs(d, levels)
            made.update(here)
            if d == cpuset:
                fresh = here
        if cpuset is not None:
            # v1 cpuset children start empty; a task cannot join until they are filled in. An existing
            # level is checked too: another pod may have just made it and not filled it yet.
            for sub in levels:
                self._fill_cpuset_once(Path(cpuset + sub), sub in fresh)
        return [sub for sub in levels if sub in made]

    def _fill_cpuset_once(self, p: Path, fresh: bool) -> None:
        """_fill_cpuset, skipped for a directory this driver has already seen filled (the same inode: a
        directory removed and made again is checked again). Reading cpuset files takes the kernel's
        cpuset lock, which every cgroup mkdir takes too: three levels checked at each pod's and each
        container's creation were a tenth of a burst's samples. `fresh`: made just now by this call, so
        empty: filled from its parent without reading it first."""
        key = str(p)
        ino = os.stat(p).st_ino
        if self._filled.get(key) == ino:
            return
        _fill_cpuset(p, fresh)
        self._filled[key] = ino

    def exists(self, path: str) -> bool:
        return any(Path(d + norm(path)).is_dir() for d in self._dirs)

    def remove(self, path: str) -> None:
        for d in self._dirs:
            rmdir_retry(Path(d + norm(path)))
        if "cpuset" in self.mounts:
            self._filled.pop(self.mounts["cpuset"] + norm(path), None)

    def procs_files(self, path: str) -> list[str]:
        return [d + norm(path) + "/cgroup.procs" for d in self._dirs]

    def warm_attach(self) -> None:
        """The attach lock's grace period, started ahead of the container's own attach (base.warm_attach)."""

        def own_file(line: str) -> str | None:
            _, ctrls, path = line.split(":", 2)
            ctrl = next((c for c in ctrls.split(",") if c in self.mounts), None)
            return f"{self.mounts[ctrl]}{norm(path)}/tasks" if ctrl else None

        warm_attach(own_file)

    def pids(self, path: str) -> list[int]:
        out: set[int] = set()
        for d in self._dirs:
            with contextlib.suppress(OSError):
                out.update(int(x) for x in Path(d + norm(path), "cgroup.procs").read_text().split())
        return sorted(out)

    # -- limits ----------------------------------------------------------------------------------
    def apply(self, path: str, res: Resources) -> None:
        if "cpu" in self.mounts:
            cpu = self._node("cpu", path).controller
            if res.cpu_shares:
                cpu.shares = max(2, res.cpu_shares)
            if res.cpu_period:
                cpu.cfs_period_us = res.cpu_period
            if res.cpu_quota:
                cpu.cfs_quota_us = res.cpu_quota
        if "memory" in self.mounts and res.memory_limit:
            mem = self._node("memory", path).controller
            mem.limit_in_bytes = res.memory_limit
            if res.memory_swap_limit and (self._dir("memory", path) / "memory.memsw.limit_in_bytes").exists():
                mem.memsw_limit_in_bytes = res.memory_swap_limit
        if "cpuset" in self.mounts and (res.cpuset_cpus or res.cpuset_mems):
            d = self._dir("cpuset", path)
            if res.cpuset_cpus:
                write(d / "cpuset.cpus", res.cpuset_cpus)
            if res.cpuset_mems:
                write(d / "cpuset.mems", res.cpuset_mems)
        if "pids" in self.mounts and res.pids_limit:
            write(self._dir("pids", path) / "pids.max", str(res.pids_limit) if res.pids_limit > 0 else "max")
        for key, value in res.unified:
            # v2-style keys ("pids.max", "memory.max") written to the v1 file of the same name when it exists.
            ctrl = key.split(".", 1)[0]
            if ctrl in self.mounts and (self._dir(ctrl, path) / key).exists():
                write(self._dir(ctrl, path) / key, value)

    def restrict_devices(self, path: str, allow: list[str]) -> None:
        """Deny every device, then allow these rules ("c 1:3 rwm", ...), as runc does on v1."""
        if "devices" not in self.mounts:
            return
        d = self._dir("devices", path)
        write(d / "devices.deny", "a")
        for rule in allow:
            write(d / "devices.allow", rule)

    # -- facts -----------------------------------------------------------------------------------
    def stats(self, path: str, detail: bool = False) -> Stats:
        usage = working = rss = limit = faults = major = cpu_ns = 0
        if "cpuacct" in self.mounts:
            cpu_ns = read_int(self._dir("cpuacct", path) / "cpuacct.usage")
        if "memory" in self.mounts:
            d = self._dir("memory", path)
            usage = read_int(d / "memory.usage_in_bytes")
            limit = read_int(d / "memory.limit_in_bytes")
            st = read_kv(d / "memory.stat")
            inactive = st.get("total_inactive_file", st.get("inactive_file", 0))
            working = max(0, usage - inactive)
            rss = st.get("total_rss", st.get("rss", 0))
            faults = st.get("total_pgfault", 0)
            major = st.get("total_pgmajfault", 0)
        pids = read_int(self._dir("pids", path) / "pids.current") if "pids" in self.mounts else 0
        if not detail:
            return Stats(cpu_ns, usage, working, rss, limit, faults, major, pids)
        user = system = cache = 0
        if "cpuacct" in self.mounts:  # user/system in USER_HZ ticks
            ticks = read_kv(self._dir("cpuacct", path) / "cpuacct.stat")
            user, system = ticks.get("user", 0) * _NS_PER_TICK, ticks.get("system", 0) * _NS_PER_TICK
        cfs = read_kv(self._dir("cpu", path) / "cpu.stat") if "cpu" in self.mounts else {}
        if "memory" in self.mounts:
            cache = st.get("total_cache", st.get("cache", 0))
        rd, wr = _blkio_bytes(self._dir("blkio", path)) if "blkio" in self.mounts else (0, 0)
        return Stats(cpu_ns, usage, working, rss, limit, faults, major, pids, user, system,
                     cfs.get("nr_periods", 0), cfs.get("nr_throttled", 0), cfs.get("throttled_time", 0),
                     cache, rd, wr)

    def oom_kills(self, path: str) -> int:
        if "memory" not in self.mounts:
            return 0
        return read_kv(self._dir("memory", path) / "memory.oom_control").get("oom_kill", 0)


def _make_dirs(root: str, levels: list[str]) -> list[str]:
    """mkdir -p from the deepest level up: under existing parents (a pod's or a container's cgroup under
    kubepods) one mkdir, not one failing mkdir per level. Returns the levels made here; a level another
    creator made meanwhile counts as existing."""
    for i in range(len(levels) - 1, -1, -1):
        try:
            os.mkdir(root + levels[i])
        except FileNotFoundError:
            if i == 0:
                raise
            continue  # its parent first
        except FileExistsError:
            made = []
        else:
            made = [levels[i]]
        for sub in levels[i + 1:]:
            try:
                os.mkdir(root + sub)
                made.append(sub)
            except FileExistsError:
                pass
        return made
    return []


def _fill_cpuset(p: Path, empty: bool = False) -> None:
    """Copy the parent's cpus/mems into an empty v1 cpuset cgroup (idempotent: the same values are
    written by whichever creator gets there, so two pods making one parent at once both see it filled).
    `empty`: known to be (just made), not read first."""
    for f in ("cpuset.cpus", "cpuset.mems"):
        filled = False
        if not empty:
            with contextlib.suppress(FileNotFoundError):  # not a kernel cgroupfs (tests' plain dirs)
                filled = bool((p / f).read_text().strip())
        if not filled:
            write(p / f, (p.parent / f).read_text().strip() or "\n")


_NS_PER_TICK = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _blkio_bytes(d: Path) -> tuple[int, int]:
    """Bytes read and written, summed over devices (blkio.throttle.io_service_bytes, as cAdvisor reads)."""
    rd = wr = 0
    with contextlib.suppress(OSError):
        for line in (d / "blkio.throttle.io_service_bytes").read_text().splitlines():
            f = line.split()
            if len(f) == 3 and f[2].isdigit():
                if f[1] == "Read":
                    rd += int(f[2])
                elif f[1] == "Write":
                    wr += int(f[2])
    return rd, wr

"""cgroup v2 driver: the unified tree, controllers enabled down the path through subtree_control."""

from __future__ import annotations

import contextlib
from pathlib import Path

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

WANTED = ("cpu", "cpuset", "memory", "pids", "io")


class V2Cgroups:
    version = "v2"

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def _dir(self, path: str) -> Path:
        return Path(str(self.root) + norm(path))

    def create(self, path: str) -> list[str]:
        made: list[str] = []
        parts = norm(path).strip("/").split("/")
        for i in range(1, len(parts) + 1):
            sub = "/" + "/".join(parts[:i])
            d = self._dir(sub)
            parent = d.parent
            with contextlib.suppress(OSError):
                avail = set((parent / "cgroup.controllers").read_text().split())
                enabled = set((parent / "cgroup.subtree_control").read_text().split())
                missing = [c for c in WANTED if c in avail and c not in enabled]
                if missing:
                    write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in missing))
            try:
                d.mkdir()
                made.append(sub)
            except FileExistsError:
                pass
        return made

    def exists(self, path: str) -> bool:
        return self._dir(path).is_dir()

    def remove(self, path: str) -> None:
        rmdir_retry(self._dir(path))

    def procs_files(self, path: str) -> list[str]:
        return [str(self._dir(path) / "cgroup.procs")]

    def warm_attach(self) -> None:
        """The attach lock's grace period, started ahead of the container's own attach (base.warm_attach)."""

        def own_file(line: str) -> str | None:
            hid, _, path = line.split(":", 2)
            return str(self._dir(path) / "cgroup.procs") if hid == "0" else None

        warm_attach(own_file)

    def pids(self, path: str) -> list[int]:
        with contextlib.suppress(OSError):
            return sorted(int(x) for x in (self._dir(path) / "cgroup.procs").read_text().split())
        return []

    def apply(self, path: str, res: Resources) -> None:
        d = self._dir(path)
        if res.cpu_shares:
            # The kubelet/runc conversion of cpu.shares [2, 262144] to cpu.weight [1, 10000].
            weight = 1 + ((max(2, res.cpu_shares) - 2) * 9999) // 262142
            write(d / "cpu.weight", str(weight))
        if res.cpu_quota or res.cpu_period:
            quota = "max" if res.cpu_quota <= 0 else str(res.cpu_quota)
            write(d / "cpu.max", f"{quota} {res.cpu_period or 100000}")
        if res.memory_limit:
            write(d / "memory.max", str(res.memory_limit))
            if res.memory_swap_limit and (d / "memory.swap.max").exists():
                swap = res.memory_swap_limit - res.memory_limit
                write(d / "memory.swap.max", "max" if res.memory_swap_limit < 0 else str(max(0, swap)))
        if res.cpuset_cpus:
            write(d / "cpuset.cpus", res.cpuset_cpus)
        if res.cpuset_mems:
            write(d / "cpuset.mems", res.cpuset_mems)
        if res.pids_limit:
            write(d / "pids.max", str(res.pids_limit) if res.pids_limit > 0 else "max")
        for key, value in res.unified:
            write(d / key, value)

    def restrict_devices(self, path: str, allow: list[str]) -> None:
        """On v2 the device allow-list is an eBPF program, which this driver does not load."""

    def stats(self, path: str, detail: bool = False) -> Stats:
        d = self._dir(path)
        cs = read_kv(d / "cpu.stat")
        cpu = cs.get("usage_usec", 0) * 1000
        usage = read_int(d / "memory.current")
        st = read_kv(d / "memory.stat")
        working = max(0, usage - st.get("inactive_file", 0))
        limit_txt = ""
        with contextlib.suppress(OSError):
            limit_txt = (d / "memory.max").read_text().strip()
        limit = int(limit_txt) if limit_txt.isdigit() else 0
        if not detail:
            return Stats(cpu, usage, working, st.get("anon", 0), limit, st.get("pgfault", 0),
                         st.get("pgmajfault", 0), read_int(d / "pids.current"))
        rd, wr = _io_bytes(d / "io.stat")
        return Stats(cpu, usage, working, st.get("anon", 0), limit, st.get("pgfault", 0),
                     st.get("pgmajfault", 0), read_int(d / "pids.current"),
                     cs.get("user_usec", 0) * 1000, cs.get("system_usec", 0) * 1000, cs.get("nr_periods", 0),
                     cs.get("nr_throttled", 0), cs.get("throttled_usec", 0) * 1000, st.get("file", 0), rd, wr)

    def oom_kills(self, path: str) -> int:
        return read_kv(self._dir(path) / "memory.events").get("oom_kill", 0)


def _io_bytes(p: Path) -> tuple[int, int]:
    """rbytes and wbytes of io.stat ("8:0 rbytes=… wbytes=… rios=…" per device), summed."""
    rd = wr = 0
    with contextlib.suppress(OSError):
        for line in p.read_text().splitlines():
            for kv in line.split()[1:]:
                k, _, v = kv.partition("=")
                if k == "rbytes" and v.isdigit():
                    rd += int(v)
                elif k == "wbytes" and v.isdigit():
                    wr += int(v)
    return rd, wr

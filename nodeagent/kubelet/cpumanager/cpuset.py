"""CPU sets in the kernel's list syntax ("0-2,4"), as kubelet's cpuset package parses and prints them, and
the host's CPU topology read from sysfs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

SYSFS_CPU = Path("/sys/devices/system/cpu")


class CPUSetError(ValueError):
    """A CPU list that does not parse."""


def parse(text: str) -> frozenset[int]:
    """cpuset.Parse: "" is the empty set; "0-2,4" is {0, 1, 2, 4}."""
    out: set[int] = set()
    text = text.strip()
    if not text:
        return frozenset()
    for part in text.split(","):
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise CPUSetError(f'invalid CPU list "{text}": {part!r} is not a CPU number or range') from None
        if a < 0 or b < a:
            raise CPUSetError(f'invalid range "{part}" ({a} > {b})' if b < a else f'invalid CPU {a}')
        out.update(range(a, b + 1))
    return frozenset(out)


def format_set(cpus: Iterable[int]) -> str:
    """CPUSet.String: sorted, consecutive runs folded into ranges ("0-2,4")."""
    ids = sorted(set(cpus))
    runs: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        runs.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(runs)


@dataclasses.dataclass(frozen=True)
class CPUInfo:
    cpu: int
    core: int  # a physical core: (socket, core_id) numbered across the machine
    socket: int


@dataclasses.dataclass(frozen=True)
class Topology:
    """The online logical CPUs with the core and socket of each (kubelet's topology.CPUTopology, reduced)."""

    cpus: tuple[CPUInfo, ...]

    def all(self) -> frozenset[int]:
        return frozenset(c.cpu for c in self.cpus)

    def cores(self) -> dict[int, frozenset[int]]:
        out: dict[int, set[int]] = {}
        for c in self.cpus:
            out.setdefault(c.core, set()).add(c.cpu)
        return {k: frozenset(v) for k, v in out.items()}

    def info(self, cpu: int) -> CPUInfo:
        return next(c for c in self.cpus if c.cpu == cpu)

    @classmethod
    def flat(cls, n: int, threads_per_core: int = 1) -> Topology:
        """A machine of `n` CPUs, `threads_per_core` siblings per core, one socket (tests, benchmarks)."""
        return cls(tuple(CPUInfo(i, i // threads_per_core, 0) for i in range(n)))


def read_topology(sysfs: Path = SYSFS_CPU) -> Topology:
    """The online CPUs and their core/socket ids from sysfs (blocking reads: call at start, off the loop)."""
    online = parse((sysfs / "online").read_text())
    cores: dict[tuple[int, int], int] = {}
    out = []
    for cpu in sorted(online):
        topo = sysfs / f"cpu{cpu}" / "topology"
        try:
            socket = int((topo / "physical_package_id").read_text())
            core_id = int((topo / "core_id").read_text())
        except (OSError, ValueError):
            socket, core_id = 0, cpu
        core = cores.setdefault((socket, core_id), len(cores))
        out.append(CPUInfo(cpu, core, socket))
    return Topology(tuple(out))


def take_by_topology(topology: Topology, available: frozenset[int], n: int) -> frozenset[int]:
    """takeByTopology, packed: whole free cores first (lowest ids), then single CPUs, preferring CPUs of
    cores already partly taken so whole cores stay free for later requests."""
    if n > len(available):
        raise CPUSetError(f"not enough cpus available to satisfy request: requested={n}, "
                          f"available={len(available)}")
    taken: set[int] = set()
    cores = topology.cores()
    for core in sorted(cores, key=lambda k: min(cores[k])):
        siblings = cores[core]
        if siblings <= available and len(siblings) <= n - len(taken):
            taken |= siblings
    if len(taken) < n:
        def partial_first(cpu: int) -> tuple[int, int, int]:
            sib = cores[topology.info(cpu).core]
            free = len(sib & (available - taken))
            return (free, topology.info(cpu).socket, cpu)

        for cpu in sorted(available - taken, key=partial_first):
            if len(taken) == n:
                break
            taken.add(cpu)
    return frozenset(taken)

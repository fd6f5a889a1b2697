"""The mount table as the kernel reports it (/proc/self/mountinfo), parsed once, in one place."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Mount:
    point: str  # the mount point, unescaped
    fstype: str
    source: str
    super_options: str  # the filesystem's own options ("rw,cpu,cpuacct" for a v1 cgroup hierarchy)


def unescape(s: str) -> str:
    """mountinfo's octal escapes (space, tab, newline, backslash) undone."""
    return s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mountinfo(path: str = "/proc/self/mountinfo") -> list[Mount]:
    """Every mount in our mount namespace, in the kernel's order (parents before children)."""
    out = []
    with open(path) as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(fields) < 5 or len(rfields) < 3:
                continue
            out.append(Mount(unescape(fields[4]), rfields[0], rfields[1], rfields[2]))
    return out

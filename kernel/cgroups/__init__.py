"""cgroups v1 and v2 behind one interface (`Cgroups`), the driver chosen by detection.

`detect_cgroups()` reads the layout from our mount table ("v1" when any v1 hierarchy is mounted,
legacy or hybrid; "v2" when only the unified tree is); `detect()` gives the driver for it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kernel.cgroups.base import Cgroups, Resources, Stats
from kernel.mounts import mountinfo

CGROUP_ROOT = Path("/sys/fs/cgroup")
_NOT_CONTROLLERS = {"rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "xattr"}


@dataclasses.dataclass(frozen=True)
class CgroupInfo:
    """cgroup layout: "v1" (legacy or hybrid) or "v2" (unified only)."""

    version: str
    hybrid: bool
    v1_controllers: dict[str, str]  # controller -> mount point
    v2_root: str | None
    v2_controllers: tuple[str, ...]

    @property
    def memory_root(self) -> str | None:
        """Where the memory controller's tree starts: its v1 hierarchy, else the unified root."""
        if self.version == "v1":
            return self.v1_controllers.get("memory")
        return self.v2_root

    @property
    def summary(self) -> str:
        if self.version == "v2":
            return f"v2 (unified), controllers: {', '.join(self.v2_controllers) or 'none'}"
        kind = "v1 hybrid" if self.hybrid else "v1 legacy"
        extra = ""
        if self.hybrid:
            extra = f"; cgroup2 at {self.v2_root} holds {', '.join(self.v2_controllers) or 'no controllers'}"
        return f"{kind}, controllers: {', '.join(sorted(self.v1_controllers))}{extra}"


def detect_cgroups() -> CgroupInfo:
    v1: dict[str, str] = {}
    v2_root = None
    for m in mountinfo():
        if m.fstype == "cgroup":
            for opt in m.super_options.split(","):
                if opt in _NOT_CONTROLLERS or opt.startswith("name="):
                    continue
                v1.setdefault(opt, m.point)
        elif m.fstype == "cgroup2" and v2_root is None:
            v2_root = m.point
    v2_ctrls: tuple[str, ...] = ()
    if v2_root:
        try:
            v2_ctrls = tuple(Path(v2_root, "cgroup.controllers").read_text().split())
        except OSError:
            v2_ctrls = ()
    if v1:
        return CgroupInfo("v1", hybrid=v2_root is not None, v1_controllers=v1, v2_root=v2_root,
                          v2_controllers=v2_ctrls)
    return CgroupInfo("v2", hybrid=False, v1_controllers={}, v2_root=v2_root, v2_controllers=v2_ctrls)


def hierarchies() -> list[str]:
    """The mount point of every cgroup hierarchy, each once in mount order: every v1 controller's, named
    ones (name=systemd) and the unified tree (a hybrid layout's too)."""
    out: list[str] = []
    for m in mountinfo():
        if m.fstype in ("cgroup", "cgroup2") and m.point not in out:
            out.append(m.point)
    return out


def detect() -> Cgroups:
    """The driver for this host: v1 (legacy or hybrid) through cgroupspy, or the unified v2 tree."""
    info = detect_cgroups()
    if info.version == "v1":
        from kernel.cgroups.v1 import V1Cgroups

        return V1Cgroups(info.v1_controllers)
    from kernel.cgroups.v2 import V2Cgroups

    return V2Cgroups(info.v2_root or str(CGROUP_ROOT))


__all__ = ["CGROUP_ROOT", "CgroupInfo", "Cgroups", "Resources", "Stats", "detect", "detect_cgroups",
           "hierarchies"]

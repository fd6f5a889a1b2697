"""cgroups v1 and v2 behind one interface (`Cgroups`), the driver chosen by detection."""

from __future__ import annotations

from cri.runtime.cgroups.base import Cgroups, Resources, Stats


def detect() -> Cgroups:
    """The driver for this host: v1 (legacy or hybrid) through cgroupspy, or the unified v2 tree."""
    from nodeagent.host.probe import detect_cgroups

    info = detect_cgroups()
    if info.version == "v1":
        from cri.runtime.cgroups.v1 import V1Cgroups

        return V1Cgroups(info.v1_controllers)
    from cri.runtime.cgroups.v2 import V2Cgroups

    return V2Cgroups(info.v2_root or "/sys/fs/cgroup")


__all__ = ["Cgroups", "Resources", "Stats", "detect"]

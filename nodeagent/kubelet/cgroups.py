"""Removing the kubelet-owned cgroups (pod<uid>, the QoS tree) once their pods are gone.

Creation and limits go through the runtime's one cgroup driver (`cri.runtime.cgroups`); removal does
too, and on cgroup v1 also rmdirs the same (empty) path in the hierarchies that driver does not manage
(freezer, blkio, name=systemd, the hybrid cgroup2 mount, ...), where runc under containerd creates a pod's parents as well.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from cri.runtime.cgroups.base import rmdir_retry


def _cgroup_mounts(mounts_file: Path = Path("/proc/self/mounts")) -> list[str]:
    """Every cgroup hierarchy, the hybrid layout's cgroup2 mount included."""
    return [line.split()[1] for line in mounts_file.read_text().splitlines()
            if line.split()[2] in ("cgroup", "cgroup2")]


def remove_cgroup(driver: Any, path: str) -> None:
    """Remove `path` (already gone is fine); raises OSError when it still holds tasks or children."""
    driver.remove(path)
    if getattr(driver, "version", "") != "v1":
        return
    for mount in _cgroup_mounts():
        p = Path(mount + "/" + path.strip("/"))
        if p.is_dir():
            with contextlib.suppress(FileNotFoundError):
                rmdir_retry(p, budget_s=1.0)

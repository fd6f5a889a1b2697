"""Removing the kubelet-owned cgroups (pod<uid>, the QoS tree) once their pods are gone.

Creation and limits go through the one cgroup driver (`kernel.cgroups`); removal does
too, and on cgroup v1 also rmdirs the same (empty) path in the hierarchies that driver does not manage
(freezer, blkio, name=systemd, the hybrid cgroup2 mount, ...), where runc under containerd creates a pod's
parents as well.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from kernel.cgroups import hierarchies
from kernel.cgroups.base import rmdir_retry


def remove_cgroup(driver: Any, path: str) -> None:
    """Remove `path` (already gone is fine); raises OSError when it still holds tasks or children."""
    driver.remove(path)
    if getattr(driver, "version", "") != "v1":
        return
    for mount in hierarchies():
        p = Path(mount + "/" + path.strip("/"))
        if p.is_dir():
            with contextlib.suppress(FileNotFoundError):
                rmdir_retry(p, budget_s=1.0)

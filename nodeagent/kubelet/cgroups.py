"""The kubelet-owned cgroups: a pod's pod<uid> cgroup made with its limits before its sandbox (the
kubelet's pod container manager), the QoS classes' cpu.shares (its QoS container manager), and removing them
(pod<uid>, the QoS tree) once their pods are gone.

Creation and limits go through the one cgroup driver (`kernel.cgroups`); removal does
too, and on cgroup v1 also rmdirs the same (empty) path in the hierarchies that driver does not manage
(freezer, blkio, name=systemd, the hybrid cgroup2 mount, ...), where runc under containerd creates a pod's
parents as well.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kernel.cgroups import hierarchies
from kernel.cgroups.base import Resources, rmdir_retry
from nodeagent.kubelet.resources import ResourceConfig, qos_cgroup, qos_cgroup_configs

# qosContainerManager's periodicQOSCgroupUpdateInterval
QOS_UPDATE_INTERVAL_S = 60.0


def ensure_pod_cgroup(driver: Any, path: str, cfg: ResourceConfig) -> None:
    """Make the pod's cgroup and write its pod-level limits (ResourceConfigForPod: cpu.shares from the
    requests; cfs quota and memory limit only when every container declares that limit), as the kubelet
    does before it asks the runtime for the sandbox."""
    driver.create(path)
    driver.apply(path, Resources(cpu_shares=cfg.cpu_shares or 0, cpu_period=cfg.cpu_period or 0,
                                 cpu_quota=cfg.cpu_quota or 0, memory_limit=cfg.memory_limit or 0))


def update_qos_cgroups(driver: Any, cgroup_root: Iterable[str], active_pods: Iterable[Mapping[str, Any]]
                       ) -> dict[str, int]:
    """qosContainerManager.UpdateCgroups: kubepods/burstable gets cpu.shares from the sum of its active
    pods' CPU requests (so Burstable pods together weigh what they asked for against Guaranteed ones),
    kubepods/besteffort the minimum (2). Called before a new pod's cgroup is made and every minute; the
    MemoryQoS gate is off by default, so memory.min is left alone. Returns the shares written per cgroup."""
    root = tuple(cgroup_root)
    written = {}
    for qos, cfg in qos_cgroup_configs(active_pods).items():
        path = qos_cgroup(qos, root).cgroupfs()
        driver.apply(path, Resources(cpu_shares=cfg.cpu_shares or 0))
        written[path] = cfg.cpu_shares or 0
    return written


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

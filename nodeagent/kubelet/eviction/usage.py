"""What each pod uses, for the eviction manager (the summary API's PodStats, reduced): memory from the pod's
cgroup; when disk matters, ephemeral storage = each container's writable layer (CRI ContainerStats) and logs,
plus the pod's disk-backed emptyDir volumes (kubelet's localStorageEviction and podDiskUsage)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kernel.fs import dir_usage
from nodeagent.kubelet.eviction.manager import PodUsage
from nodeagent.kubelet.eviction.signals import cgroup_working_set

EMPTY_DIR = "kubernetes.io~empty-dir"


def has_local_limits(pod: Mapping[str, Any]) -> bool:
    """Whether the pod declares an ephemeral-storage limit or a disk emptyDir sizeLimit."""
    spec = pod.get("spec") or {}
    for v in spec.get("volumes") or []:
        ed = v.get("emptyDir")
        if ed is not None and ed.get("sizeLimit") is not None and ed.get("medium") != "Memory":
            return True
    return any("ephemeral-storage" in ((c.get("resources") or {}).get("limits") or {})
               for f in ("initContainers", "containers") for c in spec.get(f) or [])


@dataclasses.dataclass(frozen=True)
class UsagePaths:
    memory_root: Path | None  # the memory controller's root (None: no memory stats)
    cgroup_of: Callable[[Mapping[str, Any]], str]  # the pod's cgroup path
    log_dir_of: Callable[[Mapping[str, Any]], Path]  # <log dir>/<ns>_<name>_<uid>
    volumes_dir_of: Callable[[Mapping[str, Any]], Path]  # <root>/pods/<uid>/volumes


def pod_usage(pod: Mapping[str, Any], paths: UsagePaths,
              rootfs: Mapping[str, tuple[int, int]] | None) -> PodUsage | None:
    """The pod's usage (blocking reads: call from a thread). `rootfs`: container name → (bytes, inodes) of
    its writable layer; None: memory only."""
    memory = 0
    if paths.memory_root is not None:
        try:
            memory = cgroup_working_set(Path(str(paths.memory_root) + paths.cgroup_of(pod)))
        except (OSError, ValueError):
            if rootfs is None:
                return None
    if rootfs is None:
        return PodUsage(memory=memory)
    containers: dict[str, dict[str, int]] = {}
    total = inodes = 0
    logs = paths.log_dir_of(pod)
    spec = pod.get("spec") or {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        layer, layer_inodes = rootfs.get(c["name"], (0, 0))
        log_bytes, log_inodes = dir_usage(logs / c["name"])
        containers[c["name"]] = {"ephemeral-storage": layer + log_bytes}
        total += layer + log_bytes
        inodes += layer_inodes + log_inodes
    volumes: dict[str, int] = {}
    vol_dir = paths.volumes_dir_of(pod) / EMPTY_DIR
    for v in spec.get("volumes") or []:
        ed = v.get("emptyDir")
        if ed is None or ed.get("medium") == "Memory":
            continue
        used, used_inodes = dir_usage(vol_dir / v["name"])
        volumes[v["name"]] = used
        total += used
        inodes += used_inodes
    return PodUsage(memory=memory, ephemeral_storage=total, inodes=inodes, containers=containers,
                    volumes=volumes)


def usages(pods: Sequence[Mapping[str, Any]], paths: UsagePaths,
           rootfs: Mapping[tuple[str, str], tuple[int, int]] | None,
           which: Callable[[Mapping[str, Any]], bool] = lambda p: True) -> dict[str, PodUsage]:
    """uid → usage of the pods `which` selects (blocking: call from a thread). `rootfs` is keyed by
    (pod uid, container name); None: memory only."""
    out = {}
    for pod in pods:
        if not which(pod):
            continue
        uid = (pod.get("metadata") or {}).get("uid", "")
        mine = None if rootfs is None else {n: v for (u, n), v in rootfs.items() if u == uid}
        u = pod_usage(pod, paths, mine)
        if u is not None:
            out[uid] = u
    return out

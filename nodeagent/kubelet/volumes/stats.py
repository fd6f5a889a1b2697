"""Volume usage as the kubelet's metrics providers measure it (pkg/volume/metrics_*.go).

`statfs`: the filesystem's own numbers (MetricsStatFS: local and flex volumes on their own filesystem,
tmpfs emptyDirs); `du`: the volume's directory walked on one filesystem for used bytes and inodes, with
the filesystem's capacity (MetricsDu: emptyDir on the node's disk, configMap, secret, downwardAPI,
projected); `block`: a block device's size (MetricsBlock). hostPath and image volumes have none, as on
the kubelet. Blocking (statvfs, a walk): call from a worker thread.
"""

from __future__ import annotations

import os
import stat
from typing import Any

Stats = dict[str, int]


def statfs(path: str | os.PathLike) -> Stats:
    """capacity, available and used bytes, inodes, free and used inodes of the filesystem at path."""
    st = os.statvfs(path)
    cap = st.f_blocks * st.f_frsize
    return {"availableBytes": st.f_bavail * st.f_frsize, "capacityBytes": cap,
            "usedBytes": cap - st.f_bfree * st.f_frsize, "inodesFree": st.f_ffree, "inodes": st.f_files,
            "inodesUsed": st.f_files - st.f_ffree}


def du(path: str | os.PathLike) -> tuple[int, int]:
    """(bytes used, inodes used) below path on its filesystem, each inode counted once (`du -x -s -B 1`,
    `find -xdev | wc -l`)."""
    root = os.lstat(path)
    seen: set[int] = set()
    used = inodes = 0
    stack = [os.fspath(path)]
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_dev != root.st_dev:
                continue  # another filesystem mounted inside
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                used += st.st_blocks * 512
                inodes += 1
            if stat.S_ISDIR(st.st_mode):
                stack.append(e.path)
    return used + root.st_blocks * 512, inodes + 1


def du_stats(path: str | os.PathLike) -> Stats:
    """MetricsDu: used bytes and inodes of the directory, capacity and free space of its filesystem."""
    fs = statfs(path)
    used, inodes = du(path)
    return {**fs, "usedBytes": used, "inodesUsed": inodes}


def block(device: str | os.PathLike) -> Stats:
    """MetricsBlock: a block device's capacity (its size; nothing is known of its use)."""
    fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return {"capacityBytes": os.lseek(fd, 0, os.SEEK_END)}
    finally:
        os.close(fd)


def measure(kind: str, path: str, *, block_device: bool = False, own_fs: bool = False) -> Stats | None:
    """The stats of one mounted volume by how the kubelet measures its kind; None where it has none."""
    if block_device:
        return block(path)
    if kind in ("hostPath", "image", "hosts") or not path:
        return None
    if own_fs:
        return statfs(path)
    return du_stats(path)


def summary_entry(name: str, stats: Stats, time: str, pvc: tuple[str, str] | None) -> dict[str, Any]:
    """One `volume` item of a pod in /stats/summary (stats/v1alpha1 VolumeStats)."""
    out: dict[str, Any] = {"time": time, **stats, "name": name}
    if pvc is not None:
        out["pvcRef"] = {"name": pvc[1], "namespace": pvc[0]}
    return out

"""The only place the kubelet's volume code mounts and unmounts (tmpfs for emptyDir medium Memory).

Synchronous syscalls through the kernel layer's one syscall interface (`sc`: the kernel, or a fake in
unit tests); call them from a worker thread, not the event loop.
"""

from __future__ import annotations

import os

from kernel import mounts
from kernel.mounts import is_mountpoint, mountinfo, mounts_under, remove_all_one_mount
from kernel.syscalls import LINUX, MS_BIND, MS_RDONLY, Syscalls


class MountError(OSError):
    pass


def mount_tmpfs(target: str | os.PathLike, size_bytes: int | None = None, mode: int = 0o777,
                sc: Syscalls = LINUX) -> None:
    """Mount a tmpfs on target (size= when a limit applies)."""
    opts = [f"mode={mode:o}"]
    if size_bytes:
        opts.append(f"size={size_bytes}")
    try:
        sc.mount("tmpfs", os.fspath(target), "tmpfs", 0, ",".join(opts))
    except OSError as e:
        raise MountError(e.errno, f"mount tmpfs on {target}: {os.strerror(e.errno or 0)}") from None


def mount_bind(source: str | os.PathLike, target: str | os.PathLike, sc: Syscalls = LINUX) -> None:
    """Bind source onto target (the local volume plugin's mount into the pod's volume dir)."""
    try:
        sc.mount(os.fspath(source), os.fspath(target), None, MS_BIND)
    except OSError as e:
        raise MountError(e.errno, f"mount --bind {source} {target}: {os.strerror(e.errno or 0)}") from None


def mount_device(device: str | os.PathLike, target: str | os.PathLike, fs_type: str, read_only: bool = False,
                 sc: Syscalls = LINUX) -> None:
    """Mount a block device's filesystem on target (a FlexVolume driver's device, when it leaves it to us)."""
    try:
        sc.mount(os.fspath(device), os.fspath(target), fs_type, MS_RDONLY if read_only else 0)
    except OSError as e:
        raise MountError(e.errno, f"mount -t {fs_type} {device} {target}: "
                                  f"{os.strerror(e.errno or 0)}") from None


def unmount(target: str | os.PathLike, sc: Syscalls = LINUX) -> None:
    """Unmount target (kernel.mounts.unmount: a busy mount detached lazily, not mounted is fine)."""
    try:
        mounts.unmount(target, sc)
    except OSError as e:
        raise MountError(e.errno, e.strerror) from None


def fs_type(path: str | os.PathLike) -> str | None:
    """The filesystem type mounted exactly at path, if any (the topmost one)."""
    p = os.path.realpath(path)
    found = [m.fstype for m in mountinfo() if m.point == p]
    return found[-1] if found else None


def mount_options(path: str | os.PathLike) -> str:
    p = os.path.realpath(path)
    found = [m.super_options for m in mountinfo() if m.point == p]
    return found[-1] if found else ""


__all__ = ["MountError", "fs_type", "is_mountpoint", "mount_bind", "mount_device", "mount_options",
           "mount_tmpfs", "mounts_under", "remove_all_one_mount", "unmount"]

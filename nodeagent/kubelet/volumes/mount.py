"""The only place the kubelet's volume code mounts and unmounts (tmpfs for emptyDir medium Memory).

Synchronous syscalls through the kernel layer's one syscall interface (`sc`: the kernel, or a fake in
unit tests); call them from a worker thread, not the event loop.
"""

from __future__ import annotations

import errno
import os

from kernel.mounts import mountinfo
from kernel.syscalls import LINUX, MNT_DETACH, MS_BIND, MS_RDONLY, Syscalls


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
    """Unmount target; a busy mount is detached lazily (it is gone from the tree either way)."""
    try:
        sc.umount(os.fspath(target))
        return
    except OSError as first:
        e = first.errno
    if e == errno.EBUSY:
        try:
            sc.umount(os.fspath(target), MNT_DETACH)
            return
        except OSError as second:
            e = second.errno
    if e == errno.EINVAL and not is_mountpoint(target):
        return  # not mounted: nothing to do
    raise MountError(e, f"unmount {target}: {os.strerror(e or 0)}")


def mounts_under(prefix: str | os.PathLike) -> list[str]:
    """Mount points at or below prefix (from /proc/self/mountinfo), deepest first."""
    p = os.path.realpath(prefix)
    out = [m.point for m in mountinfo() if m.point == p or m.point.startswith(p.rstrip("/") + "/")]
    return sorted(set(out), key=lambda m: m.count("/"), reverse=True)


def is_mountpoint(path: str | os.PathLike) -> bool:
    """Whether something is mounted at path. A directory on another device than its parent is one (two
    stats: the kubelet asks this for each secret/projected volume at every pod sync, and mountinfo grows
    with the pods); on the same device only mountinfo tells (a bind mount of the same filesystem)."""
    p = os.path.realpath(path)
    try:
        if os.lstat(p).st_dev != os.lstat(os.path.dirname(p) or "/").st_dev:
            return True
    except OSError:
        pass
    return p in mounts_under(p)


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
           "mount_tmpfs", "mounts_under", "unmount"]

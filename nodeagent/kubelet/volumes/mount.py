"""The only place the kubelet's volume code mounts and unmounts (tmpfs for emptyDir medium Memory).

Synchronous syscalls through the runtime's one syscall module; call them from a worker thread, not the event loop.
"""

from __future__ import annotations

import errno
import os

from cri.runtime import syscalls


class MountError(OSError):
    pass


def mount_tmpfs(target: str | os.PathLike, size_bytes: int | None = None, mode: int = 0o777) -> None:
    """Mount a tmpfs on target (size= when a limit applies)."""
    opts = [f"mode={mode:o}"]
    if size_bytes:
        opts.append(f"size={size_bytes}")
    try:
        syscalls.mount("tmpfs", os.fspath(target), "tmpfs", 0, ",".join(opts))
    except OSError as e:
        raise MountError(e.errno, f"mount tmpfs on {target}: {os.strerror(e.errno or 0)}") from None


def unmount(target: str | os.PathLike) -> None:
    """Unmount target; a busy mount is detached lazily (it is gone from the tree either way)."""
    try:
        syscalls.umount(os.fspath(target))
        return
    except OSError as first:
        e = first.errno
    if e == errno.EBUSY:
        try:
            syscalls.umount(os.fspath(target), syscalls.MNT_DETACH)
            return
        except OSError as second:
            e = second.errno
    if e == errno.EINVAL and not is_mountpoint(target):
        return  # not mounted: nothing to do
    raise MountError(e, f"unmount {target}: {os.strerror(e or 0)}")


def _unescape(s: str) -> str:
    return s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mounts_under(prefix: str | os.PathLike) -> list[str]:
    """Mount points at or below prefix (from /proc/self/mountinfo), deepest first."""
    p = os.path.realpath(prefix)
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = _unescape(line.split()[4])
            if mp == p or mp.startswith(p.rstrip("/") + "/"):
                out.append(mp)
    return sorted(set(out), key=lambda m: m.count("/"), reverse=True)


def is_mountpoint(path: str | os.PathLike) -> bool:
    return os.path.realpath(path) in mounts_under(path)


def fs_type(path: str | os.PathLike) -> str | None:
    """The filesystem type mounted exactly at path, if any."""
    p = os.path.realpath(path)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if _unescape(fields[4]) == p:
                found = fields[fields.index("-") + 1]
    return found


def mount_options(path: str | os.PathLike) -> str:
    p = os.path.realpath(path)
    found = ""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if _unescape(fields[4]) == p:
                found = fields[fields.index("-") + 3]
    return found


__all__ = ["MountError", "fs_type", "is_mountpoint", "mount_options", "mount_tmpfs", "mounts_under", "unmount"]

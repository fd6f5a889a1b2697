"""The mount table as the kernel reports it (/proc/self/mountinfo), parsed once, in one place."""

from __future__ import annotations

import dataclasses
import errno
import os
import stat

from kernel.syscalls import LINUX, MNT_DETACH, MS_BIND, MS_REMOUNT, Syscalls


@dataclasses.dataclass(frozen=True)
class Mount:
    point: str  # the mount point, unescaped
    fstype: str
    source: str
    super_options: str  # the filesystem's own options ("rw,cpu,cpuacct" for a v1 cgroup hierarchy)


def unescape(s: str) -> str:
    """mountinfo's octal escapes (space, tab, newline, backslash) undone."""
    return s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mountinfo(path: str = "/proc/self/mountinfo") -> list[Mount]:
    """Every mount in our mount namespace, in the kernel's order (parents before children)."""
    out = []
    with open(path) as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(fields) < 5 or len(rfields) < 3:
                continue
            out.append(Mount(unescape(fields[4]), rfields[0], rfields[1], rfields[2]))
    return out


# -- bind mounts (a CSI driver's NodeStage/NodePublish) ----------------------------------------------------

# The per-mount flags a bind mount can carry (mount(8)'s names), applied by a remount of the bind.
BIND_FLAGS = {"ro": 1, "nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048,
              "relatime": 1 << 21, "strictatime": 1 << 24}
BIND_NOOP_FLAGS = frozenset({"rw", "bind", "defaults", "suid", "dev", "exec", "atime", "diratime"})


def bind_flags(options: list[str] | tuple[str, ...]) -> int:
    """mount(8) option names → the MS_* flags of a bind's remount; ValueError names an option a bind
    mount cannot carry (a filesystem's own option, or a typo)."""
    flags = 0
    for o in options:
        if o in BIND_FLAGS:
            flags |= BIND_FLAGS[o]
        elif o not in BIND_NOOP_FLAGS:
            raise ValueError(f"mount option {o!r} does not apply to a bind mount (known: "
                             f"{', '.join(sorted([*BIND_FLAGS, *BIND_NOOP_FLAGS]))})")
    return flags


def bind(source: str, target: str, flags: int = 0) -> None:
    """Bind source onto target; with flags (MS_RDONLY, MS_NOSUID…), remount the bind with them, as
    `mount -o bind,ro` does. A failed remount leaves nothing mounted."""
    LINUX.mount(source, target, None, MS_BIND)
    if flags:
        try:
            LINUX.mount(None, target, None, MS_REMOUNT | MS_BIND | flags)
        except OSError:
            unmount(target)
            raise


def unmount(target: str | os.PathLike, sc: Syscalls = LINUX) -> None:
    """Unmount target; a busy mount is detached lazily (it is gone from the tree either way); a target that
    is not mounted (or not there) is no error. `sc`: the kernel, or a fake in unit tests."""
    t = os.fspath(target)
    try:
        sc.umount(t)
        return
    except OSError as first:
        e = first.errno
    if e == errno.EBUSY:
        try:
            sc.umount(t, MNT_DETACH)
            return
        except OSError as second:
            e = second.errno
    if e in (errno.EINVAL, errno.ENOENT) and not is_mountpoint(t):
        return
    raise OSError(e, f"unmount {t}: {os.strerror(e or 0)}")


def mounts_under(prefix: str | os.PathLike) -> list[str]:
    """Mount points at or below prefix (from /proc/self/mountinfo), deepest first."""
    p = os.path.realpath(prefix)
    out = [m.point for m in mountinfo() if m.point == p or m.point.startswith(p.rstrip("/") + "/")]
    return sorted(set(out), key=lambda m: m.count("/"), reverse=True)


def mount_id(path: str | os.PathLike) -> int | None:
    """The id of the mount `path` is on (the kernel's mnt_id, from /proc/self/fdinfo of an O_PATH fd), or
    None where the kernel does not report it."""
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        return _fd_mount_id(fd)
    finally:
        os.close(fd)


def _fd_mount_id(fd: int) -> int | None:
    with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
        for line in f:
            if line.startswith(b"mnt_id:"):
                return int(line.split()[1])
    return None


def remove_all_one_mount(path: str | os.PathLike) -> None:
    """Remove path and everything below it without crossing into another mount, as kubelet's
    RemoveAllOneFilesystem (by mount id, so a bind mount of the same filesystem is one too): a mount point at
    or below path raises OSError(EBUSY) and stays, with the directories above it. Gone already is fine."""
    p = os.fspath(path)
    try:
        top = mount_id(os.path.dirname(os.path.realpath(p)))
    except FileNotFoundError:
        return
    # where fdinfo has no mnt_id: the mount table's points (read once)
    points = {m.point for m in mountinfo()} if top is None else set()

    def remove(q: str) -> None:
        try:
            st = os.lstat(q)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(q)
            return
        if (mount_id(q) != top) if top is not None else os.path.realpath(q) in points:
            raise OSError(errno.EBUSY, f"cannot delete directory {q}: it is a mount point")
        with os.scandir(q) as entries:
            for e in list(entries):
                remove(e.path)
        os.rmdir(q)
    remove(p)


def is_mountpoint(path: str | os.PathLike) -> bool:
    """Whether something is mounted at path (resolved): it is on another mount than its parent (the kernel's
    mount ids, as systemd's fd_is_mount_point asks; a bind mount of the same filesystem has its own).
    Not a parse of mountinfo, which grows with the pods: the kubelet asks this for each secret/projected
    volume at every pod sync. A directory's parent is its `..` opened from it (the kernel resolves the
    symlinks and crosses out of a mount's root), not `realpath`'s lstat of every component; a file's is
    found by name. mountinfo is the fallback where the path cannot be opened or fdinfo has no mnt_id."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:  # not there, or not reachable (a dead FUSE or NFS mount): the table tells
        return _in_table(os.path.realpath(path))
    try:
        try:
            up = os.open("..", os.O_PATH | os.O_CLOEXEC, dir_fd=fd)
        except NotADirectoryError:
            return _by_name(os.path.realpath(path))
        try:
            here, there = os.fstat(fd), os.fstat(up)
            if (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino):
                return True  # "/": its own parent
            own, parent = _fd_mount_id(fd), _fd_mount_id(up)
        finally:
            os.close(up)
    finally:
        os.close(fd)
    if own is not None and parent is not None:
        return own != parent
    return _in_table(os.path.realpath(path))


def _by_name(p: str) -> bool:
    """is_mountpoint of a resolved path that is not a directory: its parent directory by name."""
    try:
        own, parent = mount_id(p), mount_id(os.path.dirname(p))
    except OSError:
        own = parent = None
    if own is not None and parent is not None:
        return own != parent
    return _in_table(p)


def _in_table(p: str) -> bool:
    if p == "/":
        return True
    return any(m.point == p for m in mountinfo())

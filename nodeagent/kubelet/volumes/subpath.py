"""subPath mounts made safe (the kubelet's pkg/volume/util/subpath, Linux).

A container's `subPath` (or expanded `subPathExpr`) names a path inside a volume that the pod itself can
write to, so it may hold symlinks pointing anywhere on the host. The kubelet never hands the runtime such a
path: it makes missing directories one component at a time without following symlinks
(`safe_make_dir`), resolves the path and refuses it unless it stays within the volume, opens it component
by component with O_NOFOLLOW, and bind-mounts that open file (`/proc/self/fd/<n>`, which a later swap of a
component cannot redirect) at `<pod dir>/volume-subpaths/<volume>/<container>/<mount index>`; that bind is
what the container mounts. The binds go when the pod's volumes are torn down (`clean`).

Blocking syscalls: call from a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from kernel.syscalls import LINUX, Syscalls
from nodeagent.kubelet.volumes import mount as mnt

SUBPATH_DIR = "volume-subpaths"
_DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_DIRECTORY
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class SubPathError(Exception):
    """The subPath cannot be used; the message is for the log (the event hides host paths, as kubelet)."""


def within(path: str, base: str) -> bool:
    """mount.PathWithinBase: path is base or below it (both resolved)."""
    return path == base or path.startswith(base.rstrip("/") + "/")


def _parts(relative: str) -> list[str]:
    return [p for p in relative.split("/") if p not in ("", ".")]


def safe_make_dir(base: str | os.PathLike, sub: str, mode: int) -> None:
    """Make base/sub, each missing component with mkdirat under an O_NOFOLLOW fd of its parent, so no
    symlink inside the volume can make a directory appear elsewhere (doSafeMakeDir)."""
    real_base = os.path.realpath(base)
    parts = _parts(sub)
    if ".." in parts:
        raise SubPathError(f"path {sub} is outside of allowed base {real_base}")
    fd = os.open(real_base, _DIR_FLAGS)
    try:
        for i, part in enumerate(parts):
            try:
                os.mkdir(part, mode, dir_fd=fd)
                os.chmod(part, mode, dir_fd=fd, follow_symlinks=False)  # mkdir's mode goes through umask
            except FileExistsError:
                pass
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                where = os.path.join(real_base, *parts[:i + 1])
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise SubPathError(f"path {where} is a symlink or not a directory: not following it "
                                       f"outside of {real_base}") from None
                raise SubPathError(f"cannot open directory {where}: {e.strerror}") from None
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def _safe_open(path: str, base: str) -> int:
    """An O_PATH fd of path, opened from base one component at a time, none a symlink (doSafeOpen)."""
    fd = os.open(base, _DIR_FLAGS)
    try:
        for part in _parts(os.path.relpath(path, base)):
            child = os.open(part, _PATH_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise SubPathError(f"{path}: a component changed into a symlink")
        return fd
    except BaseException:
        os.close(fd)
        raise


def bind_target(pod_dir: str | os.PathLike, volume: str, container: str, index: int) -> Path:
    return Path(pod_dir) / SUBPATH_DIR / volume / container / str(index)


def bind(pod_dir: str | os.PathLike, volume_path: str, sub: str, volume: str, container: str,
         index: int, sc: Syscalls = LINUX) -> str:
    """The host path the runtime mounts for this subPath: a bind of the safely opened path
    (doBindSubPath). SubPathError when the path leaves the volume."""
    vol = os.path.realpath(volume_path)
    full = os.path.realpath(os.path.join(vol, sub))
    if not within(full, vol):
        raise SubPathError(f'subpath "{full}" not within volume path "{vol}"')
    if not os.path.lexists(full):
        raise SubPathError(f"subpath {full} does not exist")
    try:
        fd = _safe_open(full, vol)
    except OSError as e:
        raise SubPathError(f"error opening subpath {full}: {e.strerror}") from None
    target = bind_target(pod_dir, volume, container, index)
    try:
        if mnt.is_mountpoint(target):
            if os.path.samestat(os.stat(full), os.stat(target)):
                return str(target)
            mnt.unmount(target, sc)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            with contextlib.suppress(FileExistsError):
                target.mkdir(mode=0o750)
        elif not target.exists():
            target.touch(mode=0o640)
        try:
            mnt.mount_bind(f"/proc/self/fd/{fd}", target, sc)
        except OSError:
            clean_one(pod_dir, target, sc)
            raise
    finally:
        os.close(fd)
    return str(target)


def clean_one(pod_dir: str | os.PathLike, target: Path, sc: Syscalls = LINUX) -> None:
    """Unmount one bind and remove it and its now-empty parents up to the pod dir."""
    if mnt.is_mountpoint(target):
        mnt.unmount(target, sc)
    with contextlib.suppress(FileNotFoundError):
        if target.is_dir() and not target.is_symlink():
            target.rmdir()
        else:
            target.unlink()
    stop = Path(pod_dir)
    cur = target.parent
    while cur != stop and within(str(cur), str(stop)):
        try:
            cur.rmdir()
        except OSError:
            break
        cur = cur.parent


def clean(pod_dir: str | os.PathLike, sc: Syscalls = LINUX) -> None:
    """Every subPath bind of the pod (doCleanSubPaths), before its volumes are unmounted."""
    root = Path(pod_dir) / SUBPATH_DIR
    if not root.is_dir():
        return
    for mp in mnt.mounts_under(root):
        mnt.unmount(mp, sc)
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            os.unlink(os.path.join(dirpath, name))
        for name in dirnames:
            os.rmdir(os.path.join(dirpath, name))
    root.rmdir()

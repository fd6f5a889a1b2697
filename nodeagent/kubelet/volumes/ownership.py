"""fsGroup volume ownership (kubelet volume_linux.go SetVolumeOwnership): every file of a volume gets the
pod's fsGroup as its group, group read (and write, for a writable volume) permission, and directories the
setgid bit, so the pod's processes (which carry fsGroup as a supplementary group) can use it.

Blocking: the volume manager runs on a worker thread.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RW_MASK = 0o660
RO_MASK = 0o440
EXEC_MASK = 0o110
# The volume kinds the kubelet changes the ownership of (hostPath is never touched).
OWNED_KINDS = frozenset({"emptyDir", "configMap", "secret", "downwardAPI", "projected"})


def fs_group(pod: Mapping[str, Any]) -> tuple[int | None, str]:
    """The pod's fsGroup and fsGroupChangePolicy (Always when unset)."""
    psc = (pod.get("spec") or {}).get("securityContext") or {}
    g = psc.get("fsGroup")
    return (None if g is None else int(g)), (psc.get("fsGroupChangePolicy") or "Always")


def needs_change(root: Path, gid: int, read_only: bool) -> bool:
    """requiresPermissionChange: the root is not owned by the group, lacks setgid, or the group's bits."""
    st = os.stat(root)
    if st.st_gid != gid:
        return True
    if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_ISGID:
        return True
    want = (RO_MASK if read_only else RW_MASK) | EXEC_MASK
    return (st.st_mode & 0o777 & want) != want


def _change(path: str, gid: int, read_only: bool) -> None:
    os.lchown(path, -1, gid)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return  # no mode on a symlink (the ..data links of a projected volume)
    mask = RO_MASK if read_only else RW_MASK
    if stat.S_ISDIR(st.st_mode):
        mask |= stat.S_ISGID | EXEC_MASK
    os.chmod(path, stat.S_IMODE(st.st_mode) | mask)


def set_volume_ownership(root: Path, gid: int, read_only: bool, policy: str = "Always") -> bool:
    """Walk the volume (not following symlinks) and give every entry the group; with OnRootMismatch, only
    when the root does not already look done. Returns whether it walked."""
    if policy == "OnRootMismatch" and not needs_change(root, gid, read_only):
        return False
    for dirpath, dirnames, filenames in os.walk(root):
        _change(dirpath, gid, read_only)
        for name in filenames:
            _change(os.path.join(dirpath, name), gid, read_only)
        for name in list(dirnames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                _change(full, gid, read_only)
                dirnames.remove(name)
    return True

"""Every raw syscall the tree makes, in one place (ctypes over libc), behind one interface.

`Syscalls` is the interface (youki's `Syscall` trait); `Linux` makes the real calls and
`kernel.testing.RecordingSyscalls` records them for unit tests. Code that wants the fake takes a
`Syscalls` argument defaulting to `LINUX`; the module-level functions (`mount`, `setns`, ...) are
`LINUX`'s bound methods, for the code of a forked child, which must not import or load anything.

Every call raises `SyscallError` (an OSError with the errno) on failure. The libc functions are
resolved at import, so a process forked from the daemon can call them without loading anything.
"""

from __future__ import annotations

import ctypes
import functools
import os

from kernel.errors import SyscallError

_libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
MS_SHARED = 1 << 20
MNT_DETACH = 2

PR_SET_PDEATHSIG = 1
PR_SET_KEEPCAPS = 8
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

SYS_pivot_root = 155  # x86_64
SYS_capset = 126
SYS_setgroups = 116
SYS_setresuid = 117
SYS_setresgid = 119
SYS_mount_setattr = 442  # the same number on every architecture (new syscall table)
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
ENOSYS = 38

_mount = _libc.mount
_mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_umount2 = _libc.umount2
_umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_unshare = _libc.unshare
_setns = _libc.setns
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_syscall = _libc.syscall
_sethostname = _libc.sethostname
_sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
_getsockopt = _libc.getsockopt
_setsockopt = _libc.setsockopt


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise SyscallError(e, f"{what}: {os.strerror(e)}")


def _b(s: str | bytes | None) -> bytes | None:
    if s is None or isinstance(s, bytes):
        return s
    return os.fsencode(s)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class Syscalls:
    """The raw syscalls, one method each; `Linux` is the kernel, `kernel.testing.RecordingSyscalls`
    the fake. Arguments are the kernel's (flags as ints, paths as str)."""

    def mount(self, source: str | None, target: str, fstype: str | None, flags: int = 0,
              data: str | None = None) -> None:
        raise NotImplementedError

    def umount(self, target: str, flags: int = 0) -> None:
        raise NotImplementedError

    def mount_setattr_rdonly_recursive(self, target: str) -> None:
        """Make the mount at `target` and every mount below it read-only (Linux >= 5.12)."""
        raise NotImplementedError

    def supports_mount_setattr(self) -> bool:
        raise NotImplementedError

    def unshare(self, flags: int) -> None:
        raise NotImplementedError

    def setns(self, fd: int, nstype: int = 0) -> None:
        raise NotImplementedError

    def pivot_root(self, new_root: str, put_old: str) -> None:
        raise NotImplementedError

    def prctl(self, option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
        raise NotImplementedError

    def sethostname(self, name: str) -> None:
        raise NotImplementedError

    def capset(self, effective: int, permitted: int, inheritable: int) -> None:
        """Set this thread's capability sets (64-bit masks)."""
        raise NotImplementedError

    def setgroups(self, groups: list[int]) -> None:
        raise NotImplementedError

    def setresgid(self, gid: int) -> None:
        raise NotImplementedError

    def setresuid(self, uid: int) -> None:
        raise NotImplementedError


class Linux(Syscalls):
    """The real calls, through libc."""

    def mount(self, source: str | None, target: str, fstype: str | None, flags: int = 0,
              data: str | None = None) -> None:
        _check(_mount(_b(source), _b(target), _b(fstype), flags, _b(data)), f"mount {target}")

    def umount(self, target: str, flags: int = 0) -> None:
        _check(_umount2(_b(target), flags), f"umount {target}")

    def mount_setattr_rdonly_recursive(self, target: str) -> None:
        attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
        size = ctypes.sizeof(attr)
        _check(_syscall(SYS_mount_setattr, AT_FDCWD, _b(target), AT_RECURSIVE, ctypes.byref(attr), size),
               f"mount_setattr {target}")

    def supports_mount_setattr(self) -> bool:
        """mount_setattr exists (ENOSYS otherwise): probed with a call that can only fail on its arguments."""
        attr = _MountAttr(0, 0, 0, 0)
        rc = _syscall(SYS_mount_setattr, AT_FDCWD, b"/", 0, ctypes.byref(attr), 1)  # size too small: EINVAL
        return not (rc != 0 and ctypes.get_errno() == ENOSYS)

    def unshare(self, flags: int) -> None:
        _check(_unshare(flags), "unshare")

    def setns(self, fd: int, nstype: int = 0) -> None:
        _check(_setns(fd, nstype), "setns")

    def pivot_root(self, new_root: str, put_old: str) -> None:
        _check(_syscall(SYS_pivot_root, _b(new_root), _b(put_old)), "pivot_root")

    def prctl(self, option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
        rc = _prctl(option, arg2, arg3, arg4, arg5)
        if rc < 0:
            e = ctypes.get_errno()
            raise SyscallError(e, f"prctl {option}: {os.strerror(e)}")
        return rc

    def sethostname(self, name: str) -> None:
        b = name.encode()
        _check(_sethostname(b, len(b)), "sethostname")

    def capset(self, effective: int, permitted: int, inheritable: int) -> None:
        hdr = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
        data = (_CapData * 2)()
        for i, shift in enumerate((0, 32)):
            data[i].effective = (effective >> shift) & 0xFFFFFFFF
            data[i].permitted = (permitted >> shift) & 0xFFFFFFFF
            data[i].inheritable = (inheritable >> shift) & 0xFFFFFFFF
        _check(_syscall(SYS_capset, ctypes.byref(hdr), ctypes.byref(data)), "capset")

    def setgroups(self, groups: list[int]) -> None:
        arr = (ctypes.c_uint32 * max(1, len(groups)))(*groups)
        # The raw syscall: glibc's wrapper would broadcast to threads, which a forked child has none of.
        _check(_syscall(SYS_setgroups, len(groups), arr), "setgroups")

    def setresgid(self, gid: int) -> None:
        _check(_syscall(SYS_setresgid, gid, gid, gid), "setresgid")

    def setresuid(self, uid: int) -> None:
        _check(_syscall(SYS_setresuid, uid, uid, uid), "setresuid")


LINUX = Linux()

# The kernel's calls as plain functions (bound once, so a forked child resolves nothing).
mount = LINUX.mount
umount = LINUX.umount
mount_setattr_rdonly_recursive = LINUX.mount_setattr_rdonly_recursive
supports_mount_setattr = LINUX.supports_mount_setattr
unshare = LINUX.unshare
setns = LINUX.setns
pivot_root = LINUX.pivot_root
prctl = LINUX.prctl
sethostname = LINUX.sethostname
capset = LINUX.capset
setgroups = LINUX.setgroups
setresgid = LINUX.setresgid
setresuid = LINUX.setresuid


def getsockopt(fd: int, level: int, name: int, buf: ctypes.Array | ctypes._CArgObject, size: int) -> int:
    """getsockopt(2) into a ctypes buffer (or a byref into one); the length the kernel wrote."""
    ln = ctypes.c_uint32(size)
    rc = _getsockopt(fd, level, name, buf, ctypes.byref(ln))
    del buf  # an error's traceback must not keep the caller's buffer (a bytearray's export) alive
    _check(rc, f"getsockopt {level}/{name}")
    return ln.value


def setsockopt(fd: int, level: int, name: int, buf: ctypes.Array, size: int) -> None:
    """setsockopt(2) from a ctypes buffer."""
    rc = _setsockopt(fd, level, name, buf, size)
    del buf  # as in getsockopt
    _check(rc, f"setsockopt {level}/{name}")


def mallopt(param: int, value: int) -> bool:
    """glibc's mallopt; False where the C library has no such knob (musl) or refuses the value."""
    try:
        fn = _libc.mallopt
    except AttributeError:
        return False
    fn.argtypes = (ctypes.c_int, ctypes.c_int)
    fn.restype = ctypes.c_int
    return bool(fn(param, value))


@functools.cache
def last_cap() -> int:
    """The highest capability number this kernel knows (fixed while it runs: read once; a /proc/sys read
    per container start showed on the runtime's event loop in a burst of pods)."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except OSError:
        return 40

"""A recording fake of `kernel.syscalls.Syscalls`, for unit tests (youki's `TestHelperSyscall`).

Every call is recorded as `Call(name, args)` in order and succeeds by default; `fail(name, errno)`
makes the next call(s) of that syscall raise the `SyscallError` the kernel would. Nothing touches
the kernel, so tests of mount/namespace/identity code run unprivileged.
"""

from __future__ import annotations

import dataclasses
import errno as errnos
import os

from kernel.errors import SyscallError
from kernel.syscalls import Syscalls


@dataclasses.dataclass(frozen=True)
class Call:
    name: str
    args: tuple


class RecordingSyscalls(Syscalls):
    def __init__(self, *, mount_setattr: bool = True) -> None:
        self.calls: list[Call] = []
        self._failures: dict[str, list[int]] = {}
        self._mount_setattr = mount_setattr

    # -- programming and reading -------------------------------------------------------------------
    def fail(self, name: str, err: int = errnos.EPERM, times: int = 1) -> None:
        """The next `times` calls of `name` raise SyscallError(err), after being recorded."""
        self._failures.setdefault(name, []).extend([err] * times)

    def of(self, name: str) -> list[tuple]:
        """The arguments of every recorded call of `name`, in order."""
        return [c.args for c in self.calls if c.name == name]

    def names(self) -> list[str]:
        return [c.name for c in self.calls]

    def _record(self, name: str, *args: object) -> None:
        self.calls.append(Call(name, args))
        pending = self._failures.get(name)
        if pending:
            err = pending.pop(0)
            raise SyscallError(err, f"{name}: {os.strerror(err)}")

    # -- the interface -----------------------------------------------------------------------------
    def mount(self, source: str | None, target: str, fstype: str | None, flags: int = 0,
              data: str | None = None) -> None:
        self._record("mount", source, target, fstype, flags, data)

    def umount(self, target: str, flags: int = 0) -> None:
        self._record("umount", target, flags)

    def mount_setattr_rdonly_recursive(self, target: str) -> None:
        self._record("mount_setattr_rdonly_recursive", target)

    def supports_mount_setattr(self) -> bool:
        self._record("supports_mount_setattr")
        return self._mount_setattr

    def unshare(self, flags: int) -> None:
        self._record("unshare", flags)

    def setns(self, fd: int, nstype: int = 0) -> None:
        self._record("setns", fd, nstype)

    def pivot_root(self, new_root: str, put_old: str) -> None:
        self._record("pivot_root", new_root, put_old)

    def prctl(self, option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
        self._record("prctl", option, arg2, arg3, arg4, arg5)
        return 0

    def sethostname(self, name: str) -> None:
        self._record("sethostname", name)

    def capset(self, effective: int, permitted: int, inheritable: int) -> None:
        self._record("capset", effective, permitted, inheritable)

    def setgroups(self, groups: list[int]) -> None:
        self._record("setgroups", list(groups))

    def setresgid(self, gid: int) -> None:
        self._record("setresgid", gid)

    def setresuid(self, uid: int) -> None:
        self._record("setresuid", uid)

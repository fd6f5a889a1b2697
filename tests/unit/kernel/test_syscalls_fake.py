"""kernel.testing.RecordingSyscalls: the fake of the one syscall interface, and code driven through it."""

from __future__ import annotations

import errno
import inspect

import pytest

from kernel import syscalls
from kernel.errors import SyscallError
from kernel.testing import Call, RecordingSyscalls
from nodeagent.kubelet.volumes import mount as volmount


def _interface() -> set[str]:
    return {n for n, f in vars(syscalls.Syscalls).items() if inspect.isfunction(f) and not n.startswith("_")}


def test_the_fake_and_the_kernel_implement_the_whole_interface_with_its_signatures():
    names = _interface()
    assert {"mount", "umount", "unshare", "setns", "pivot_root", "mount_setattr_rdonly_recursive"} <= names
    for impl in (RecordingSyscalls, syscalls.Linux):
        for n in names:
            mine = vars(impl).get(n)
            assert mine is not None, f"{impl.__name__} lacks {n}"
            assert inspect.signature(mine) == inspect.signature(getattr(syscalls.Syscalls, n)), (impl, n)
    assert syscalls.mount == syscalls.LINUX.mount  # the module's functions are the kernel's calls


def test_calls_are_recorded_in_order_with_their_arguments():
    sc = RecordingSyscalls()
    sc.unshare(syscalls.CLONE_NEWNS | syscalls.CLONE_NEWUTS)
    sc.mount("proc", "/r/proc", "proc", syscalls.MS_NOSUID)
    sc.pivot_root("/r", "/r/.old")
    sc.umount("/.old", syscalls.MNT_DETACH)
    sc.setgroups([1, 2])
    assert sc.names() == ["unshare", "mount", "pivot_root", "umount", "setgroups"]
    assert sc.calls[1] == Call("mount", ("proc", "/r/proc", "proc", syscalls.MS_NOSUID, None))
    assert sc.of("umount") == [("/.old", syscalls.MNT_DETACH)]
    assert sc.of("setgroups") == [([1, 2],)]
    assert sc.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1) == 0


def test_programmed_failures_raise_the_kernels_error_then_stop():
    sc = RecordingSyscalls(mount_setattr=False)
    sc.fail("setns", errno.EINVAL, times=2)
    for _ in range(2):
        with pytest.raises(SyscallError) as e:
            sc.setns(7, syscalls.CLONE_NEWNET)
        assert e.value.errno == errno.EINVAL and isinstance(e.value, OSError)
    sc.setns(7, syscalls.CLONE_NEWNET)
    assert sc.of("setns") == [(7, syscalls.CLONE_NEWNET)] * 3  # failed calls are recorded too
    assert sc.supports_mount_setattr() is False


def test_tmpfs_volume_mount_options_through_the_fake():
    sc = RecordingSyscalls()
    volmount.mount_tmpfs("/v/cache", 64 << 20, 0o755, sc=sc)
    assert sc.of("mount") == [("tmpfs", "/v/cache", "tmpfs", 0, "mode=755,size=67108864")]
    sc.fail("mount", errno.EPERM)
    with pytest.raises(volmount.MountError) as e:
        volmount.mount_tmpfs("/v/x", sc=sc)
    assert e.value.errno == errno.EPERM


def test_a_busy_volume_is_detached_lazily():
    sc = RecordingSyscalls()
    sc.fail("umount", errno.EBUSY)
    volmount.unmount("/v/cache", sc=sc)
    assert sc.of("umount") == [("/v/cache", 0), ("/v/cache", syscalls.MNT_DETACH)]


def test_unmounting_what_is_not_mounted_is_fine_and_other_errors_are_not(tmp_path):
    sc = RecordingSyscalls()
    sc.fail("umount", errno.EINVAL)
    volmount.unmount(tmp_path, sc=sc)  # EINVAL and no mount there: nothing to do
    sc.fail("umount", errno.EPERM)
    with pytest.raises(volmount.MountError) as e:
        volmount.unmount(tmp_path, sc=sc)
    assert e.value.errno == errno.EPERM and len(sc.of("umount")) == 2

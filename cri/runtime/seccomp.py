"""The runtime's RuntimeDefault seccomp profile (the filter mechanism is kernel.seccomp).

Docker's and containerd's default profile is an allow-list of ~350 syscalls; this is its
deny-list counterpart: the syscalls that profile refuses to a container without extra
capabilities fail with EPERM (kernel modules, kexec, reboot, swap, clock setting, mounts,
namespace creation, bpf/perf, keyrings, ptrace-like peeking, handle-based opens, ...).
Everything else is allowed. Built once in the daemon; a forked container child only loads it.
"""

from __future__ import annotations

import errno

from kernel.seccomp import SCMP_ACT_ALLOW, SCMP_ACT_ERRNO, Profile

DENIED = (
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module", "delete_module",
    "finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "get_kernel_syms", "get_mempolicy",
    "init_module", "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie",
    "mbind", "mount", "mount_setattr", "move_mount", "move_pages", "name_to_handle_at", "nfsservctl",
    "open_by_handle_at", "open_tree", "perf_event_open", "pivot_root", "process_vm_readv",
    "process_vm_writev", "ptrace", "query_module", "quotactl", "quotactl_fd", "reboot", "request_key",
    "set_mempolicy", "setns", "settimeofday", "swapoff", "swapon", "sysfs", "_sysctl", "umount", "umount2",
    "unshare", "uselib", "userfaultfd", "ustat", "vm86", "vm86old",
)

_PROFILE: Profile | None = None


def runtime_default() -> Profile:
    """The process-wide RuntimeDefault filter (built at first use, before any fork needs it)."""
    global _PROFILE
    if _PROFILE is None:
        _PROFILE = Profile(SCMP_ACT_ALLOW, tuple((name, SCMP_ACT_ERRNO(errno.EPERM)) for name in DENIED))
    return _PROFILE

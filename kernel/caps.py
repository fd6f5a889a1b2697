"""Linux capabilities: their names and numbers, this process's bounding set, masks of them."""

from __future__ import annotations

import functools

CAPS = [
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
]
NUMBER = {name: i for i, name in enumerate(CAPS)}


@functools.cache
def own_bounding() -> int:
    """This process's bounding set (-1, all, when it cannot be read): no process it starts can get a
    capability outside it (root may run without some, e.g. CAP_SYS_RESOURCE in a container). Read once:
    this process never drops from it (its children do, after the fork), and a /proc/self/status read per
    CreateContainer showed on the runtime's event loop in a burst of pods."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapBnd:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return -1


def held(last_cap: int) -> list[str]:
    """The capabilities this kernel knows (up to `last_cap`) that this process's bounding set holds."""
    bounding = own_bounding()
    return [c for c in CAPS if NUMBER[c] <= last_cap and bounding >> NUMBER[c] & 1]


def mask(names: list[str]) -> int:
    m = 0
    for n in names:
        m |= 1 << NUMBER[n]
    return m

"""Linux capability names and the runtime's default set (the one containerd and runc give)."""

from __future__ import annotations

from cri.runtime.errors import InvalidArgument

CAPS = [
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
]
NUMBER = {name: i for i, name in enumerate(CAPS)}

DEFAULT = ("CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
           "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE")


def _norm(name: str, field: str) -> str:
    n = name.upper().removeprefix("CAP_")
    if n != "ALL" and n not in NUMBER:
        raise InvalidArgument(f"{field}: unknown capability {name!r}")
    return n


def own_bounding() -> int:
    """This process's bounding set: a container can get no capability the runtime lacks itself (here,
    e.g., root runs without CAP_SYS_RESOURCE), so "all" means all of ours, as containerd's cap.Current()."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapBnd:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return -1


def resolve(add: list[str], drop: list[str], privileged: bool, last_cap: int) -> list[str]:
    """The container's capability names: default set, then add, then drop (like containerd)."""
    bounding = own_bounding()
    known = [c for c in CAPS if NUMBER[c] <= last_cap and bounding >> NUMBER[c] & 1]
    if privileged:
        return known
    adds = [_norm(c, "capabilities.add_capabilities") for c in add]
    drops = [_norm(c, "capabilities.drop_capabilities") for c in drop]
    caps = set(DEFAULT)
    if "ALL" in adds:
        caps = set(known)
    caps.update(c for c in adds if c != "ALL")
    if "ALL" in drops:
        caps = {c for c in adds if c != "ALL"}
    caps.difference_update(drops)
    return [c for c in known if c in caps]


def mask(names: list[str]) -> int:
    m = 0
    for n in names:
        m |= 1 << NUMBER[n]
    return m

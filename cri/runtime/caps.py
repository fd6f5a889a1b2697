"""The runtime's capability policy: containerd's and runc's default set, and how a container's
add/drop lists and `privileged` change it. Names, numbers and masks are the kernel layer's (kernel.caps)."""

from __future__ import annotations

from cri.runtime.errors import InvalidArgument
from kernel import caps
from kernel.caps import mask  # the runtime turns resolved names into the mask it hands the launcher

__all__ = ["DEFAULT", "mask", "resolve"]

DEFAULT = ("CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
           "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE")


def _norm(name: str, field: str) -> str:
    n = name.upper().removeprefix("CAP_")
    if n != "ALL" and n not in caps.NUMBER:
        raise InvalidArgument(f"{field}: unknown capability {name!r}")
    return n


def resolve(add: list[str], drop: list[str], privileged: bool, last_cap: int) -> list[str]:
    """The container's capability names: default set, then add, then drop (like containerd). "all" means
    all of the runtime's own (a container can get no capability the runtime lacks), as containerd's
    cap.Current()."""
    known = caps.held(last_cap)
    if privileged:
        return known
    adds = [_norm(c, "capabilities.add_capabilities") for c in add]
    drops = [_norm(c, "capabilities.drop_capabilities") for c in drop]
    chosen = set(DEFAULT)
    if "ALL" in adds:
        chosen = set(known)
    chosen.update(c for c in adds if c != "ALL")
    if "ALL" in drops:
        chosen = {c for c in adds if c != "ALL"}
    chosen.difference_update(drops)
    return [c for c in known if c in chosen]

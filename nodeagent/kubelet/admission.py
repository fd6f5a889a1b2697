"""The kubelet's own pod admission (lifecycle/predicate.go, sysctl/allowlist.go) and the active deadline
(active_deadline.go): what makes the kubelet fail a pod it was given, with the reason it reports.

Pure. A rejected pod gets phase Failed, the reason, "Pod was rejected: <message>" and a Warning event
of that reason; an expired deadline gets phase Failed, reason DeadlineExceeded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.api.times import parse_rfc3339

NODE_OS = "linux"
OS_LABEL = "kubernetes.io/os"

# kubelet's safe sysctls (safe_sysctls.go, 1.33), every one namespaced by the pod's own net or ipc namespace.
SAFE_SYSCTLS = ("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem",
                "net.ipv4.tcp_wmem")
DEADLINE_REASON = "DeadlineExceeded"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"


@dataclasses.dataclass(frozen=True)
class Rejection:
    reason: str
    message: str

    def status(self) -> dict[str, Any]:
        """The status the kubelet writes for a pod it rejects (kubelet.rejectPod)."""
        return {"phase": "Failed", "reason": self.reason, "message": f"Pod was rejected: {self.message}"}


def sysctl_dots(name: str) -> str:
    """ConvertSysctlVariableToDotsSeparator: net/ipv4/ip_forward → net.ipv4.ip_forward (a '.' inside a
    slash-separated name is part of a component and becomes '/')."""
    if "/" not in name:
        return name
    first_dot, first_slash = name.find("."), name.find("/")
    if first_dot != -1 and first_dot < first_slash:
        return name
    return name.translate(str.maketrans("./", "/."))


def _namespace(name: str) -> str:
    """Which namespace makes a sysctl per pod ("" when it is not namespaced), as utilsysctl.NamespacedBy."""
    if name.startswith(("kernel.shm", "kernel.msg", "kernel.sem", "fs.mqueue.")):
        return "ipc"
    if name.startswith("net."):
        return "net"
    if name in ("kernel.hostname", "kernel.domainname"):
        return "uts"
    return ""


def check_sysctl_pattern(pattern: str) -> None:
    """--allowed-unsafe-sysctls: each name or prefix must be one the kernel namespaces (NewAllowlist)."""
    p = sysctl_dots(pattern)
    if not _namespace(p.removesuffix("*")):
        raise ValueError(f"--allowed-unsafe-sysctls: the sysctl {pattern!r} is not known to be namespaced")


def sysctl_rejection(pod: Mapping[str, Any], allowed_unsafe: Iterable[str] = ()) -> Rejection | None:
    """SysctlForbidden for a sysctl neither safe nor allowed by --allowed-unsafe-sysctls, or one of the
    pod's own net/ipc namespace while it shares the host's."""
    spec = pod.get("spec") or {}
    sysctls = ((spec.get("securityContext") or {}).get("sysctls")) or []
    if not sysctls:
        return None
    exact = set(SAFE_SYSCTLS)
    prefixes = []
    for pattern in allowed_unsafe:
        p = sysctl_dots(pattern)
        if p.endswith("*"):
            prefixes.append(p[:-1])
        else:
            exact.add(p)
    for s in sysctls:
        name = sysctl_dots(str(s.get("name", "")))
        if name in exact or any(name.startswith(p) for p in prefixes):
            ns = _namespace(name)
            if ns == "ipc" and spec.get("hostIPC") or ns == "net" and spec.get("hostNetwork"):
                return Rejection("SysctlForbidden",
                                 f'forbidden sysctl: "{name}" not allowed with host {ns} enabled')
            continue
        return Rejection("SysctlForbidden", f'forbidden sysctl: "{name}" not allowlisted')
    return None


def admit(pod: Mapping[str, Any], allowed_unsafe_sysctls: Iterable[str] = ()) -> Rejection | None:
    """The first reason the kubelet refuses to run this pod, or None."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if OS_LABEL in labels and labels[OS_LABEL] != NODE_OS:
        return Rejection("PodOSSelectorNodeLabelDoesNotMatch",
                         "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label")
    os_name = ((pod.get("spec") or {}).get("os") or {}).get("name")
    if os_name is not None and os_name != NODE_OS:
        return Rejection("PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS")
    return sysctl_rejection(pod, allowed_unsafe_sysctls)


def pods_capacity(running: int, capacity: int) -> Rejection | None:
    """OutOfpods: the node already runs as many pods as its capacity (--max-pods, --pods-per-core)."""
    if capacity and running + 1 > capacity:
        return Rejection("OutOfpods", "Node didn't have enough resource: pods, requested: 1, "
                                      f"used: {running}, capacity: {capacity}")
    return None


def deadline_exceeded(pod: Mapping[str, Any], status: Mapping[str, Any] | None, now: float) -> bool:
    """activeDeadlineSeconds counted from status.startTime (the kubelet's first sync of the pod)."""
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    start = (status or {}).get("startTime") or (pod.get("status") or {}).get("startTime")
    if deadline is None or not start:
        return False
    return now - parse_rfc3339(start) >= int(deadline)


def deadline_status() -> dict[str, Any]:
    return {"phase": "Failed", "reason": DEADLINE_REASON, "message": DEADLINE_MESSAGE}

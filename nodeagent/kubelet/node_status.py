"""The Node object's locally known parts (kubelet pkg/kubelet/nodestatus/setters.go, kubelet_node_status.go).

Capacity from the machine, nodeInfo, addresses, well-known labels, and the Ready condition from the
runtime/network/PLEG health; the pressure conditions come from the eviction manager. Reads are small
local files (call from a thread); everything else is pure.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nodeagent.api.times import rfc3339

DEFAULT_MAX_PODS = 110
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
UNREACHABLE_TAINT = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}

_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x",
         "riscv64": "riscv64", "i686": "386"}


def go_arch(machine: str | None = None) -> str:
    m = machine or platform.machine()
    return _ARCH.get(m, m)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def machine_capacity(fs_path: str | os.PathLike, max_pods: int = DEFAULT_MAX_PODS,
                     proc: Path = Path("/proc")) -> dict[str, str]:
    """cpu (logical CPUs), memory (MemTotal, in Ki as kubelet reports it), pods, ephemeral-storage (the
    filesystem holding the kubelet root, in Ki), hugepages of the sizes the kernel offers."""
    mem_kib = 0
    hp_sizes = []
    for line in (proc / "meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    hp_dir = Path("/sys/kernel/mm/hugepages")
    if hp_dir.exists():
        for d in sorted(hp_dir.iterdir()):
            kb = int(d.name.split("-")[1].rstrip("kB"))
            hp_sizes.append("1Gi" if kb == 1048576 else f"{kb // 1024}Mi" if kb >= 1024 else f"{kb}Ki")
    st = os.statvfs(fs_path)
    cap = {"cpu": str(os.cpu_count() or 1), "memory": f"{mem_kib}Ki", "pods": str(max_pods),
           "ephemeral-storage": f"{st.f_blocks * st.f_frsize // 1024}Ki"}
    for size in hp_sizes:
        cap[f"hugepages-{size}"] = "0"
    return cap


def _os_image(etc: Path) -> str:
    for line in _read(etc / "os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return "Linux"


def node_info(runtime_name: str, runtime_version: str, kubelet_version: str, etc: Path = Path("/etc"),
              proc: Path = Path("/proc"), sys_dir: Path = Path("/sys")) -> dict[str, str]:
    """status.nodeInfo; the runtime's name/version come from CRI Version (e.g. containerd, 1.6.20)."""
    uname = os.uname()
    return {"machineID": _read(etc / "machine-id"),
            "systemUUID": _read(sys_dir / "class/dmi/id/product_uuid").lower(),
            "bootID": _read(proc / "sys/kernel/random/boot_id"),
            "kernelVersion": uname.release, "osImage": _os_image(etc),
            "containerRuntimeVersion": f"{runtime_name}://{runtime_version}",
            "kubeletVersion": kubelet_version, "kubeProxyVersion": "",
            "operatingSystem": "linux", "architecture": go_arch(uname.machine)}


def node_labels(node_name: str, hostname: str | None = None,
                extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The labels a kubelet puts on its Node."""
    arch = go_arch()
    labels = {"kubernetes.io/hostname": (hostname or node_name).lower(), "kubernetes.io/os": "linux",
              "kubernetes.io/arch": arch, "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": arch}
    labels.update(extra or {})
    return labels


def node_addresses(hostname: str, internal_ips: Iterable[str]) -> list[dict[str, str]]:
    out = [{"type": "InternalIP", "address": ip} for ip in internal_ips]
    out.append({"type": "Hostname", "address": hostname})
    return out


def aggregate(errs: Sequence[str]) -> str:
    """utilerrors.NewAggregate(errs).Error(): one error as is, several as "[a, b]"."""
    if len(errs) == 1:
        return errs[0]
    return "[" + ", ".join(errs) + "]"


def runtime_errors(runtime_ready: bool, network_ready: bool, network_reason: str = "",
                   network_message: str = "", pleg_healthy: bool = True, pleg_message: str = "") -> list[str]:
    """The kubelet's runtimeState errors that keep a node NotReady, in its wording."""
    errs = []
    if not runtime_ready:
        errs.append("container runtime is down")
    if not network_ready:
        errs.append(f"container runtime network not ready: NetworkReady=false reason:{network_reason} "
                    f"message:{network_message}")
    if not pleg_healthy:
        errs.append(f"PLEG is not healthy: {pleg_message}")
    return errs


def ready_condition(errors: Sequence[str], now: float,
                    old: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Ready condition: KubeletReady, or KubeletNotReady with the aggregated errors."""
    if errors:
        c = {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": aggregate(errors)}
    else:
        c = {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "message": "kubelet is posting ready status"}
    c["lastHeartbeatTime"] = rfc3339(now)
    if old and old.get("status") == c["status"] and old.get("lastTransitionTime"):
        c["lastTransitionTime"] = old["lastTransitionTime"]
    else:
        c["lastTransitionTime"] = rfc3339(now)
    return c


def node_taints(existing: Iterable[Mapping[str, Any]], ready: bool,
                pressure_taints: Iterable[Mapping[str, str]] = ()) -> list[dict[str, Any]]:
    """Our condition taints set from scratch (not-ready while not Ready, plus pressure ones); others kept."""
    ours = {NOT_READY_TAINT["key"], "node.kubernetes.io/memory-pressure", "node.kubernetes.io/disk-pressure",
            "node.kubernetes.io/pid-pressure"}
    out = [dict(t) for t in existing if t.get("key") not in ours]
    if not ready:
        out.append(dict(NOT_READY_TAINT))
    out.extend(dict(t) for t in pressure_taints)
    return out

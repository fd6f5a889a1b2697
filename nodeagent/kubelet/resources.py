"""The container manager's arithmetic (kubelet pkg/kubelet/cm, kuberuntime, qos/policy).

Pure functions from pod specs to the numbers the runtime's cgroup driver writes: cpu.shares,
CFS quota/period, memory limits, their cgroup v2 equivalents, oom_score_adj, QoS cgroup names and
node allocatable. Nothing here touches the kernel.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from nodeagent.api.qos import (
    BEST_EFFORT,
    BURSTABLE,
    GUARANTEED,
    container_limits,
    container_requests,
    pod_qos,
)
from nodeagent.api.quantity import int_value, milli_value, parse_quantity
from nodeagent.kubelet.static_pods import is_mirror_pod, is_static_pod

MIN_SHARES = 2
MAX_SHARES = 262144
SHARES_PER_CPU = 1024
MILLI_CPU_TO_CPU = 1000
QUOTA_PERIOD_US = 100_000  # 100 ms, the CFS period kubelet uses
MIN_QUOTA_PERIOD_US = 1000  # 1 ms, the smallest quota the kernel accepts

GUARANTEED_OOM_SCORE_ADJ = -997
BEST_EFFORT_OOM_SCORE_ADJ = 1000
KUBELET_OOM_SCORE_ADJ = -999
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000

ResourceList = dict[str, Fraction]


def _milli(v: Fraction | int) -> int:
    return math.ceil(Fraction(v) * 1000)


def _whole(v: Fraction | int) -> int:
    return math.ceil(Fraction(v))


# -- cpu / memory conversions ---------------------------------------------------------------------


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """MilliCPUToShares: 1 cpu = 1024 shares, clamped to [2, 262144]; 0 -> 2."""
    if milli_cpu <= 0:
        return MIN_SHARES
    shares = milli_cpu * SHARES_PER_CPU // MILLI_CPU_TO_CPU
    return max(MIN_SHARES, min(MAX_SHARES, shares))


def milli_cpu_to_quota(milli_cpu: int, period_us: int = QUOTA_PERIOD_US) -> int:
    """MilliCPUToQuota: quota in µs for `period_us`; 0 means "no limit", at least 1 ms otherwise."""
    if milli_cpu <= 0:
        return 0
    return max(MIN_QUOTA_PERIOD_US, milli_cpu * period_us // MILLI_CPU_TO_CPU)


def cpu_shares_to_weight(shares: int, formula: str = "linear") -> int:
    """cgroup v2 cpu.weight for v1 shares.

    "linear": runc <= 1.2 (Debian 12's runc, containerd's CRI on it) maps [2, 262144] onto [1, 10000]
    linearly, so the default 1024 shares become 39. "quadratic": opencontainers/cgroups >= 0.0.2 (runc 1.3,
    crun 1.23) fits a curve through (2, 1), (1024, 100), (262144, 10000) so 1024 shares give weight 100.
    """
    if shares <= 0:
        return 0
    if formula == "linear":
        return 1 + ((shares - 2) * 9999) // 262142
    if formula != "quadratic":
        raise ValueError(f"unknown cpu.weight formula {formula!r}")
    if shares <= 2:
        return 1
    if shares >= MAX_SHARES:
        return 10000
    lg = math.log2(shares)
    return math.ceil(10 ** ((lg * lg + 125 * lg) / 612.0 - 7.0 / 34.0))


def cpu_max(quota_us: int | None, period_us: int = QUOTA_PERIOD_US) -> str:
    """cgroup v2 cpu.max: "<quota> <period>", or "max <period>" when unlimited."""
    if quota_us is None or quota_us <= 0:
        return f"max {period_us}"
    return f"{quota_us} {period_us}"


def memory_max(limit_bytes: int | None) -> str:
    """cgroup v2 memory.max: bytes, or "max" when unlimited."""
    return str(limit_bytes) if limit_bytes else "max"


# -- pod-level sums (component-helpers resource.PodRequests / PodLimits) --------------------------


def _add(into: ResourceList, rl: Mapping[str, Any]) -> None:
    for name, value in rl.items():
        q = value if isinstance(value, Fraction) else parse_quantity(value)  # already parsed, e.g. reserved
        into[name] = into.get(name, Fraction(0)) + q


def _max(into: ResourceList, rl: Mapping[str, Fraction]) -> None:
    for name, value in rl.items():
        if name not in into or value > into[name]:
            into[name] = value


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def _aggregate(pod: Mapping[str, Any], pick) -> ResourceList:
    spec = pod.get("spec") or {}
    total: ResourceList = {}
    for c in spec.get("containers") or []:
        _add(total, pick(c))
    sidecars: ResourceList = {}
    init_max: ResourceList = {}
    for c in spec.get("initContainers") or []:
        if _is_sidecar(c):
            # Sidecars keep running: they add to the steady state and to every later init step.
            _add(total, pick(c))
            _add(sidecars, pick(c))
            step = dict(sidecars)
        else:
            step = dict(sidecars)
            _add(step, pick(c))
        _max(init_max, step)
    _max(total, init_max)
    _add(total, spec.get("overhead") or {})
    return total


def pod_requests(pod: Mapping[str, Any]) -> ResourceList:
    """Effective pod requests: sum of app containers and sidecars, at least the largest init step, plus
    overhead."""
    pod_level = ((pod.get("spec") or {}).get("resources") or {})
    if pod_level.get("requests") or pod_level.get("limits"):
        out: ResourceList = {}
        _add(out, container_requests({"resources": pod_level}))
        _add(out, (pod.get("spec") or {}).get("overhead") or {})
        return out
    return _aggregate(pod, container_requests)


def pod_limits(pod: Mapping[str, Any]) -> ResourceList:
    """Effective pod limits, aggregated like requests (a resource some container leaves unlimited is still
    summed over the others: whether the pod is limited at all is `pod_limits_declared`)."""
    pod_level = ((pod.get("spec") or {}).get("resources") or {})
    if pod_level.get("limits"):
        out: ResourceList = {}
        _add(out, pod_level["limits"])
        _add(out, (pod.get("spec") or {}).get("overhead") or {})
        return out
    return _aggregate(pod, container_limits)


def pod_limits_declared(pod: Mapping[str, Any], resource: str) -> bool:
    """True when every container (init included) has a non-zero limit for `resource`."""
    pod_level = ((pod.get("spec") or {}).get("resources") or {}).get("limits") or {}
    if resource in pod_level:
        return parse_quantity(pod_level[resource]) > 0
    spec = pod.get("spec") or {}
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        if parse_quantity(container_limits(c).get(resource, 0)) <= 0:
            return False
    return True


# -- cgroup configs ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ResourceConfig:
    """What a pod (or QoS) cgroup gets; None means "leave unset / unlimited"."""

    cpu_shares: int | None = None
    cpu_quota: int | None = None  # µs per period; -1 = unlimited
    cpu_period: int | None = None
    memory_limit: int | None = None  # bytes

    def v1_files(self) -> dict[str, str]:
        """The cgroup v1 files and values (cpu, memory controllers)."""
        out = {}
        if self.cpu_shares is not None:
            out["cpu.shares"] = str(self.cpu_shares)
        if self.cpu_period is not None:
            out["cpu.cfs_period_us"] = str(self.cpu_period)
        if self.cpu_quota is not None:
            out["cpu.cfs_quota_us"] = str(self.cpu_quota)
        if self.memory_limit is not None:
            out["memory.limit_in_bytes"] = str(self.memory_limit) if self.memory_limit > 0 else "-1"
        return out

    def v2_files(self, weight_formula: str = "linear") -> dict[str, str]:
        """The cgroup v2 equivalents (cpu.weight, cpu.max, memory.max)."""
        out = {}
        if self.cpu_shares is not None:
            out["cpu.weight"] = str(cpu_shares_to_weight(self.cpu_shares, weight_formula))
        if self.cpu_quota is not None or self.cpu_period is not None:
            quota = self.cpu_quota if self.cpu_quota and self.cpu_quota > 0 else None
            out["cpu.max"] = cpu_max(quota, self.cpu_period or QUOTA_PERIOD_US)
        if self.memory_limit is not None:
            out["memory.max"] = memory_max(self.memory_limit if self.memory_limit > 0 else None)
        return out


def pod_resource_config(pod: Mapping[str, Any], enforce_cpu_limits: bool = True,
                        cpu_period_us: int = QUOTA_PERIOD_US) -> ResourceConfig:
    """ResourceConfigForPod: the pod<uid> cgroup's limits by QoS class."""
    reqs = pod_requests(pod)
    lims = pod_limits(pod)
    cpu_requests = _milli(reqs.get("cpu", 0))
    cpu_limits = _milli(lims.get("cpu", 0))
    memory_limits = _whole(lims.get("memory", 0))
    shares = milli_cpu_to_shares(cpu_requests)
    quota = milli_cpu_to_quota(cpu_limits, cpu_period_us) if enforce_cpu_limits else -1
    qos = pod_qos(pod)
    if qos == GUARANTEED:
        return ResourceConfig(shares, quota, cpu_period_us, memory_limits)
    if qos == BURSTABLE:
        cpu_declared = pod_limits_declared(pod, "cpu")
        mem_declared = pod_limits_declared(pod, "memory")
        return ResourceConfig(shares,
                              quota if cpu_declared else None,
                              cpu_period_us if cpu_declared else None,
                              memory_limits if mem_declared else None)
    return ResourceConfig(cpu_shares=MIN_SHARES)


def container_resources(pod: Mapping[str, Any], container: Mapping[str, Any], memory_capacity: int,
                        enforce_cpu_limits: bool = True,
                        cpu_period_us: int = QUOTA_PERIOD_US) -> dict[str, int]:
    """CRI LinuxContainerResources fields for one container (kuberuntime calculateLinuxResources)."""
    res = container.get("resources") or {}
    raw_requests = res.get("requests") or {}
    limits = res.get("limits") or {}
    if "cpu" not in raw_requests and "cpu" in limits:
        shares = milli_cpu_to_shares(milli_value(limits["cpu"]))
    else:
        shares = milli_cpu_to_shares(milli_value(raw_requests.get("cpu", 0)))
    out = {"cpu_shares": shares,
           "memory_limit_in_bytes": int_value(limits.get("memory", 0)),
           "oom_score_adj": oom_score_adj(pod, container, memory_capacity)}
    if enforce_cpu_limits:
        out["cpu_period"] = cpu_period_us
        out["cpu_quota"] = milli_cpu_to_quota(milli_value(limits.get("cpu", 0)), cpu_period_us)
    return out


# -- oom_score_adj (pkg/kubelet/qos/policy.go) -------------------------------------------------------


def is_critical_pod(pod: Mapping[str, Any]) -> bool:
    """Static, mirror, or priority >= system-cluster-critical's."""
    if is_static_pod(pod) or is_mirror_pod(pod):
        return True
    priority = (pod.get("spec") or {}).get("priority")
    return priority is not None and priority >= SYSTEM_CRITICAL_PRIORITY


def is_node_critical_pod(pod: Mapping[str, Any]) -> bool:
    return is_critical_pod(pod) and (pod.get("spec") or {}).get("priorityClassName") == "system-node-critical"


def oom_score_adj(pod: Mapping[str, Any], container: Mapping[str, Any], memory_capacity: int) -> int:
    """GetContainerOOMScoreAdjust.

    Guaranteed and node-critical -997, BestEffort 1000, Burstable 1000 - 1000*request/capacity kept in
    [1000 + (-997), 999] = [3, 999] (the kubelet's code; the docs' table says 2 for the floor). A sidecar
    gets no higher a score than the smallest regular container so it is not killed first.
    """
    if is_node_critical_pod(pod):
        return GUARANTEED_OOM_SCORE_ADJ
    qos = pod_qos(pod)
    if qos == GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == BEST_EFFORT:
        return BEST_EFFORT_OOM_SCORE_ADJ
    request = int_value(container_requests(container).get("memory", 0))
    adj = 1000 - (1000 * request) // memory_capacity
    if _is_sidecar(container) and container in ((pod.get("spec") or {}).get("initContainers") or []):
        regular = [int_value(container_requests(c).get("memory", 0))
                   for c in (pod.get("spec") or {}).get("containers") or []]
        if regular:
            adj = min(adj, 1000 - (1000 * min(regular)) // memory_capacity)
    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if adj == BEST_EFFORT_OOM_SCORE_ADJ:
        return adj - 1
    return adj


# -- the QoS cgroup hierarchy -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CgroupName:
    """A cgroup as driver-neutral components, e.g. ("kubepods", "burstable", "pod<uid>")."""

    parts: tuple[str, ...]

    def child(self, name: str) -> CgroupName:
        return CgroupName(self.parts + (name,))

    def cgroupfs(self) -> str:
        """The cgroupfs driver's path: "/kubepods/burstable/pod<uid>"."""
        return "/" + "/".join(self.parts)

    def systemd(self) -> str:
        """The systemd driver's path:
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice" (dashes inside a
        component become underscores, as systemd slice names require)."""
        if not self.parts:
            return "/"
        escaped = [p.replace("-", "_") for p in self.parts]
        out, prefix = [], ""
        for part in escaped:
            prefix = f"{prefix}-{part}" if prefix else part
            out.append(prefix + ".slice")
        return "/" + "/".join(out)


def node_allocatable_cgroup(cgroup_root: Iterable[str] = ()) -> CgroupName:
    """`kubepods` below the configured --cgroup-root (components; empty = the hierarchy's root)."""
    return CgroupName(tuple(cgroup_root) + ("kubepods",))


def qos_cgroup(qos: str, cgroup_root: Iterable[str] = ()) -> CgroupName:
    """Guaranteed pods sit directly under kubepods; the other classes under their own child."""
    top = node_allocatable_cgroup(cgroup_root)
    if qos == GUARANTEED:
        return top
    return top.child("burstable" if qos == BURSTABLE else "besteffort")


def pod_cgroup(pod: Mapping[str, Any], cgroup_root: Iterable[str] = ()) -> CgroupName:
    uid = (pod.get("metadata") or {}).get("uid", "")
    return qos_cgroup(pod_qos(pod), cgroup_root).child(f"pod{uid}")


def qos_cgroup_configs(active_pods: Iterable[Mapping[str, Any]]) -> dict[str, ResourceConfig]:
    """The burstable and besteffort cgroups' cpu.shares (qos_container_manager setCPUCgroupConfig):
    burstable gets the sum of its pods' cpu requests, besteffort the minimum."""
    burstable_milli = 0
    for pod in active_pods:
        if pod_qos(pod) == BURSTABLE:
            burstable_milli += _milli(pod_requests(pod).get("cpu", 0))
    return {BURSTABLE: ResourceConfig(cpu_shares=milli_cpu_to_shares(burstable_milli)),
            BEST_EFFORT: ResourceConfig(cpu_shares=MIN_SHARES)}


# -- node allocatable ------------------------------------------------------------------------------


def _to_list(rl: Mapping[str, Any] | None) -> ResourceList:
    out: ResourceList = {}
    _add(out, rl or {})
    return out


def node_allocatable(capacity: Mapping[str, Any], system_reserved: Mapping[str, Any] | None = None,
                     kube_reserved: Mapping[str, Any] | None = None,
                     hard_eviction: Mapping[str, Any] | None = None) -> ResourceList:
    """Allocatable = capacity - system-reserved - kube-reserved - hard eviction threshold, never below 0.

    `hard_eviction` maps resource names ("memory", "ephemeral-storage") to absolute reservations;
    `eviction.thresholds.hard_eviction_reservation` computes it from parsed thresholds.
    """
    cap = _to_list(capacity)
    out: ResourceList = {}
    reserved = [_to_list(system_reserved), _to_list(kube_reserved), _to_list(hard_eviction)]
    for name, value in cap.items():
        v = value - sum((r.get(name, Fraction(0)) for r in reserved), Fraction(0))
        out[name] = max(v, Fraction(0))
    return out


def kubepods_resource_config(capacity: Mapping[str, Any], system_reserved: Mapping[str, Any] | None = None,
                             kube_reserved: Mapping[str, Any] | None = None) -> ResourceConfig:
    """What enforcing node allocatable writes on `kubepods` (capacity minus the reservations, but not minus
    the eviction threshold, so the eviction manager acts before the cgroup's OOM killer)."""
    alloc = node_allocatable(capacity, system_reserved, kube_reserved)
    mem = _whole(alloc["memory"]) if "memory" in alloc else None
    return ResourceConfig(cpu_shares=milli_cpu_to_shares(_milli(alloc.get("cpu", 0))), memory_limit=mem)

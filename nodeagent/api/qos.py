"""Pod QoS class exactly as Kubernetes computes it (pkg/apis/core/v1/helper/qos).

Used by the kubelet (cgroup placement, oom_score_adj, eviction ranking), the apiserver
(status.qosClass) and the scheduler, so it lives in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from nodeagent.api.quantity import parse_quantity

GUARANTEED = "Guaranteed"
BURSTABLE = "Burstable"
BEST_EFFORT = "BestEffort"

# Only these resources decide the class (isSupportedQoSComputeResource).
QOS_RESOURCES = ("cpu", "memory")


def container_requests(container: Mapping[str, Any]) -> dict[str, Any]:
    """The container's requests with the apiserver's defaulting applied: a missing request takes its limit."""
    res = container.get("resources") or {}
    requests = dict(res.get("requests") or {})
    for name, value in (res.get("limits") or {}).items():
        requests.setdefault(name, value)
    return requests


def container_limits(container: Mapping[str, Any]) -> dict[str, Any]:
    return dict((container.get("resources") or {}).get("limits") or {})


def _accumulate(lists: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Fraction], bool]:
    """Sum the positive cpu/memory values; report whether every list had both cpu and memory."""
    total: dict[str, Fraction] = {}
    all_have_both = True
    for rl in lists:
        found = set()
        for name, value in rl.items():
            if name not in QOS_RESOURCES:
                continue
            q = parse_quantity(value)
            if q > 0:
                found.add(name)
                total[name] = total.get(name, Fraction(0)) + q
        if not {"cpu", "memory"} <= found:
            all_have_both = False
    return total, all_have_both


def compute_pod_qos(pod: Mapping[str, Any]) -> str:
    """ComputePodQOS: sums over init and app containers (or pod-level resources when set)."""
    spec = pod.get("spec") or {}
    pod_resources = spec.get("resources")
    if pod_resources:
        # Pod-level resources (PodLevelResources): they alone decide, with requests defaulted from limits.
        containers: list[Mapping[str, Any]] = [{"resources": pod_resources}]
    else:
        containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    requests, _ = _accumulate(container_requests(c) for c in containers)
    limits, is_guaranteed = _accumulate(container_limits(c) for c in containers)
    if not requests and not limits:
        return BEST_EFFORT
    if is_guaranteed:
        for name, req in requests.items():
            if limits.get(name) != req:
                is_guaranteed = False
                break
    if is_guaranteed and len(requests) == len(limits):
        return GUARANTEED
    return BURSTABLE


def pod_qos(pod: Mapping[str, Any]) -> str:
    """GetPodQOS: the class recorded in status (it never changes for a pod), else computed."""
    recorded = (pod.get("status") or {}).get("qosClass")
    return recorded or compute_pod_qos(pod)

"""Taints and tolerations: one matcher for the scheduler, the taint manager and the kubelet."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
MEMORY_PRESSURE = "node.kubernetes.io/memory-pressure"
DISK_PRESSURE = "node.kubernetes.io/disk-pressure"
PID_PRESSURE = "node.kubernetes.io/pid-pressure"
NETWORK_UNAVAILABLE = "node.kubernetes.io/network-unavailable"


def tolerates(tol: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Toleration.ToleratesTaint: empty effect matches all effects, empty key with Exists matches all keys."""
    effect = tol.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = tol.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Exists":
        return True
    return op == "Equal" and (tol.get("value") or "") == (taint.get("value") or "")


def first_untolerated(taints: Iterable[Mapping[str, Any]], tolerations: Iterable[Mapping[str, Any]],
                      effects: tuple[str, ...] | None = None) -> Mapping[str, Any] | None:
    """The first taint (optionally of the given effects) no toleration matches."""
    tols = list(tolerations)
    for t in taints:
        if effects and t.get("effect") not in effects:
            continue
        if not any(tolerates(tol, t) for tol in tols):
            return t
    return None


def no_execute_deadline(taints: Iterable[Mapping[str, Any]], tolerations: Iterable[Mapping[str, Any]]
                        ) -> float | None:
    """Seconds a pod may stay on a node with these taints: 0 = evict now, None = forever.

    The taint manager's rule: any untolerated NoExecute taint evicts at once; otherwise
    the smallest tolerationSeconds among the tolerations used bounds the stay.
    """
    tols = list(tolerations)
    deadline: float | None = None
    for t in taints:
        if t.get("effect") != "NoExecute":
            continue
        used = [tol for tol in tols if tolerates(tol, t)]
        if not used:
            return 0.0
        for tol in used:
            secs = tol.get("tolerationSeconds")
            if secs is None:
                continue
            secs = max(float(secs), 0.0)
            deadline = secs if deadline is None else min(deadline, secs)
    return deadline

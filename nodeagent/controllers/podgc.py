"""PodGC decisions: which pods to force-delete (pkg/controller/podgc).

Pods bound to nodes that no longer exist (orphans), terminating pods that were
never scheduled, and the oldest terminated pods beyond --terminated-pod-gc-threshold.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from nodeagent.controllers.podutil import is_terminating


def _phase(pod: Mapping[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase", "")


def orphaned(pods: Iterable[Mapping[str, Any]], node_names: Collection[str]) -> list[Mapping[str, Any]]:
    """Pods bound to a node we do not know (the caller confirms each node is really gone)."""
    return [p for p in pods if (p.get("spec") or {}).get("nodeName")
            and p["spec"]["nodeName"] not in node_names]


def unscheduled_terminating(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for p in pods if is_terminating(p) and not (p.get("spec") or {}).get("nodeName")]


def terminated_over_threshold(pods: Iterable[Mapping[str, Any]], threshold: int) -> list[Mapping[str, Any]]:
    """The oldest Succeeded/Failed pods past the threshold (0 disables this)."""
    if threshold <= 0:
        return []
    done = [p for p in pods if _phase(p) in ("Succeeded", "Failed") and not is_terminating(p)]
    if len(done) <= threshold:
        return []
    done.sort(key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
    return done[:len(done) - threshold]

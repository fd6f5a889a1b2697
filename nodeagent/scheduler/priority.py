"""Pod priority from PriorityClasses, for pods the admission chain didn't resolve (spec.priority unset)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

SYSTEM_CLASSES = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}


def resolve_priority(pod: Mapping[str, Any], classes: Iterable[Mapping[str, Any]]) -> tuple[int, str | None]:
    """(priority, preemptionPolicy or None): spec.priority wins; else the named class; else the
    globalDefault class; else 0."""
    spec = pod.get("spec") or {}
    if spec.get("priority") is not None:
        return int(spec["priority"]), spec.get("preemptionPolicy")
    name = spec.get("priorityClassName")
    if name in SYSTEM_CLASSES:
        return SYSTEM_CLASSES[name], None
    default = None
    for pc in classes:
        if name and (pc.get("metadata") or {}).get("name") == name:
            return int(pc.get("value") or 0), pc.get("preemptionPolicy")
        if pc.get("globalDefault"):
            default = pc
    if default is not None and not name:
        return int(default.get("value") or 0), default.get("preemptionPolicy")
    return 0, None

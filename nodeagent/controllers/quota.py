"""ResourceQuota status decisions: which resources a quota's `hard` keys count, and the `used` they add up to.

The per-object charge is the one admission uses (nodeagent.api.quota.object_usage), so the
admission check and this recount agree; this side only keeps `used` current
after deletes and phase changes that admission never sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from nodeagent.api.quantity import format_quantity
from nodeagent.api.quota import object_usage
from nodeagent.api.resources import RESOURCES, Resource

_POD_KEYS = ("pods", "cpu", "memory")


def resource_for_key(key: str) -> Resource | None:
    """The resource a hard key counts (`pods`, `requests.cpu`, `services.nodeports`,
    `count/deployments.apps`)."""
    name, group = key, ""
    if key.startswith("count/"):
        name, _, group = key[len("count/"):].partition(".")
    elif key in _POD_KEYS or key.startswith(("requests.", "limits.")):
        name = "pods"
    elif key.startswith("services."):
        name = "services"
    for r in RESOURCES:
        if r.name == name and r.group == group and r.namespaced:
            return r
    return None


def usage(hard: Mapping[str, Any], objects: Mapping[str, Iterable[Mapping[str, Any]]]) -> dict[str, str]:
    """`used` for each hard key, from the namespace's objects keyed by Resource.name+group."""
    totals: dict[str, Fraction] = {}
    seen: set[tuple[str, str]] = set()
    for key in hard:
        res = resource_for_key(key)
        if res is None or (res.name, res.group) in seen:
            continue
        seen.add((res.name, res.group))
        for obj in objects.get(f"{res.name}.{res.group}", ()):
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            for k, v in object_usage(res, dict(obj)).items():
                totals[k] = totals.get(k, Fraction(0)) + v
    return {k: format_quantity(totals.get(k, Fraction(0))) for k in hard}

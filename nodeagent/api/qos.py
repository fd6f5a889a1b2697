"""Pod QoS class (Guaranteed, Burstable, BestEffort) from container requests and limits, as Kubernetes computes it."""

from __future__ import annotations

import functools
from typing import Any

from nodeagent.api.quantity import QuantityError
from nodeagent.api.quantity import parse_quantity as _parse

# Pods repeat the same few quantity strings; parsing them is the costly part of defaulting a pod.
parse_quantity = functools.lru_cache(maxsize=4096)(_parse)

_COMPUTE = ("cpu", "memory")


def qos_class(spec: dict[str, Any]) -> str:
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    guaranteed = True
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    for c in containers:
        res = (c.get("resources") or {}) if isinstance(c, dict) else {}
        req = res.get("requests") or {}
        lim = res.get("limits") or {}
        try:
            for k in _COMPUTE:
                if k in req and parse_quantity(req[k]) != 0:
                    requests[k] = True
                if k in lim and parse_quantity(lim[k]) != 0:
                    limits[k] = True
            if not all(k in lim for k in _COMPUTE):
                guaranteed = False
            for k in _COMPUTE:
                if k in req and k in lim and parse_quantity(req[k]) != parse_quantity(lim[k]):
                    guaranteed = False
        except QuantityError:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and containers:
        return "Guaranteed"
    return "Burstable"

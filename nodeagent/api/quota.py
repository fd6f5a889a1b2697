"""ResourceQuota arithmetic: what one object charges against a quota.

Compute resources (requests.*/limits.*, bare cpu/memory meaning requests) of non-terminal pods, and object
counts (pods, services, configmaps, secrets, ..., count/<res>.<group>). The apiserver's admission and the
quota controller's recount both charge through here, so they agree (as Kubernetes' quota evaluators do).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from nodeagent.api.quantity import QuantityError, parse_quantity
from nodeagent.api.resources import Resource

_COUNT_NAMES = {"pods": "pods", "services": "services", "configmaps": "configmaps", "secrets": "secrets",
                "replicationcontrollers": "replicationcontrollers", "resourcequotas": "resourcequotas",
                "persistentvolumeclaims": "persistentvolumeclaims"}


def pod_usage(pod: dict[str, Any]) -> dict[str, Fraction]:
    """What one pod charges against a quota (requests.cpu, limits.memory, ..., pods)."""
    out: dict[str, Fraction] = {"pods": Fraction(1), "count/pods": Fraction(1)}
    spec = pod.get("spec") or {}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        for kind in ("requests", "limits"):
            for k, v in (res.get(kind) or {}).items():
                try:
                    q = parse_quantity(v)
                except QuantityError:
                    continue
                out[f"{kind}.{k}"] = out.get(f"{kind}.{k}", Fraction(0)) + q
                if kind == "requests":
                    out[k] = out.get(k, Fraction(0)) + q
    return out


def object_usage(res: Resource, obj: dict[str, Any]) -> dict[str, Fraction]:
    if res.name == "pods" and not res.group:
        phase = (obj.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return {}
        return pod_usage(obj)
    out = {f"count/{res.name}" + (f".{res.group}" if res.group else ""): Fraction(1)}
    if not res.group and res.name in _COUNT_NAMES:
        out[_COUNT_NAMES[res.name]] = Fraction(1)
    if res.name == "services" and not res.group:
        typ = (obj.get("spec") or {}).get("type")
        if typ == "NodePort":
            out["services.nodeports"] = Fraction(1)
        if typ == "LoadBalancer":
            out["services.loadbalancers"] = Fraction(1)
    return out

"""HorizontalPodAutoscaler autoscaling/v1 <-> autoscaling/v2, as kube-apiserver converts them.

v1 has one metric, `targetCPUUtilizationPercentage`; v2 has a list. Going to v1, the CPU utilization
target becomes that field and every other metric, the current metrics, the conditions and the behavior
travel in the `autoscaling.alpha.kubernetes.io/*` annotations (metrics in v1's own MetricSpec shape,
as pkg/apis/autoscaling/v1/conversion.go writes them); coming back, the annotations are read and removed.
A v1 object with neither a CPU target nor other metrics gets v2's default: CPU at 80% utilization.
"""

from __future__ import annotations

import copy
import json
from typing import Any

V1, V2 = "autoscaling/v1", "autoscaling/v2"
METRICS = "autoscaling.alpha.kubernetes.io/metrics"
CURRENT_METRICS = "autoscaling.alpha.kubernetes.io/current-metrics"
CONDITIONS = "autoscaling.alpha.kubernetes.io/conditions"
BEHAVIOR = "autoscaling.alpha.kubernetes.io/behavior"
DEFAULT_CPU_UTILIZATION = 80


class ConversionError(ValueError):
    """An annotation that does not decode: the object cannot be converted."""


def _is_cpu_utilization(m: dict[str, Any]) -> bool:
    r = m.get("resource") or {}
    return m.get("type") == "Resource" and r.get("name") == "cpu" \
        and (r.get("target") or {}).get("type") == "Utilization"


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


# -- MetricSpec / MetricStatus: v2 <-> v1's annotation shape -----------------------------------------
def _spec_to_v1(m: dict[str, Any]) -> dict[str, Any]:
    t = m.get("type")
    if t in ("Resource", "ContainerResource"):
        src = m.get("resource" if t == "Resource" else "containerResource") or {}
        tgt = src.get("target") or {}
        body = _drop_none({"name": src.get("name"), "container": src.get("container"),
                           "targetAverageUtilization": tgt.get("averageUtilization"),
                           "targetAverageValue": tgt.get("averageValue")})
        return {"type": t, "resource" if t == "Resource" else "containerResource": body}
    if t == "Pods":
        src = m.get("pods") or {}
        metric, tgt = src.get("metric") or {}, src.get("target") or {}
        return {"type": t, "pods": _drop_none({"metricName": metric.get("name"),
                                               "targetAverageValue": tgt.get("averageValue"),
                                               "selector": metric.get("selector")})}
    if t == "Object":
        src = m.get("object") or {}
        metric, tgt = src.get("metric") or {}, src.get("target") or {}
        return {"type": t, "object": _drop_none({"target": src.get("describedObject"),
                                                 "metricName": metric.get("name"),
                                                 "targetValue": tgt.get("value"),
                                                 "selector": metric.get("selector"),
                                                 "averageValue": tgt.get("averageValue")})}
    if t == "External":
        src = m.get("external") or {}
        metric, tgt = src.get("metric") or {}, src.get("target") or {}
        return {"type": t, "external": _drop_none({"metricName": metric.get("name"),
                                                   "metricSelector": metric.get("selector"),
                                                   "targetValue": tgt.get("value"),
                                                   "targetAverageValue": tgt.get("averageValue")})}
    return copy.deepcopy(m)


def _target(utilization: Any = None, average: Any = None, value: Any = None) -> dict[str, Any]:
    if utilization is not None:
        return {"type": "Utilization", "averageUtilization": utilization}
    if average is not None:
        return {"type": "AverageValue", "averageValue": average}
    return _drop_none({"type": "Value", "value": value})


def _spec_from_v1(m: dict[str, Any]) -> dict[str, Any]:
    t = m.get("type")
    if t in ("Resource", "ContainerResource"):
        key = "resource" if t == "Resource" else "containerResource"
        src = m.get(key) or {}
        return {"type": t, key: _drop_none({"name": src.get("name"), "container": src.get("container"),
                                            "target": _target(src.get("targetAverageUtilization"),
                                                              src.get("targetAverageValue"))})}
    if t == "Pods":
        src = m.get("pods") or {}
        return {"type": t, "pods": {"metric": _drop_none({"name": src.get("metricName"),
                                                          "selector": src.get("selector")}),
                                    "target": _target(average=src.get("targetAverageValue"))}}
    if t == "Object":
        src = m.get("object") or {}
        return {"type": t, "object": {"describedObject": src.get("target") or {},
                                      "metric": _drop_none({"name": src.get("metricName"),
                                                            "selector": src.get("selector")}),
                                      "target": _target(average=src.get("averageValue"),
                                                        value=src.get("targetValue"))}}
    if t == "External":
        src = m.get("external") or {}
        return {"type": t, "external": {"metric": _drop_none({"name": src.get("metricName"),
                                                              "selector": src.get("metricSelector")}),
                                        "target": _target(average=src.get("targetAverageValue"),
                                                          value=src.get("targetValue"))}}
    return copy.deepcopy(m)


def _status_to_v1(m: dict[str, Any]) -> dict[str, Any]:
    t = m.get("type")
    key = {"Resource": "resource", "ContainerResource": "containerResource", "Pods": "pods",
           "Object": "object", "External": "external"}.get(t or "")
    if key is None:
        return copy.deepcopy(m)
    src = m.get(key) or {}
    cur, metric = src.get("current") or {}, src.get("metric") or {}
    if key in ("resource", "containerResource"):
        body = {"name": src.get("name"), "container": src.get("container"),
                "currentAverageUtilization": cur.get("averageUtilization"),
                "currentAverageValue": cur.get("averageValue")}
    elif key == "pods":
        body = {"metricName": metric.get("name"), "currentAverageValue": cur.get("averageValue"),
                "selector": metric.get("selector")}
    elif key == "object":
        body = {"target": src.get("describedObject"), "metricName": metric.get("name"),
                "currentValue": cur.get("value"), "selector": metric.get("selector"),
                "averageValue": cur.get("averageValue")}
    else:
        body = {"metricName": metric.get("name"), "metricSelector": metric.get("selector"),
                "currentValue": cur.get("value"), "currentAverageValue": cur.get("averageValue")}
    return {"type": t, key: _drop_none(body)}


def _status_from_v1(m: dict[str, Any]) -> dict[str, Any]:
    t = m.get("type")
    key = {"Resource": "resource", "ContainerResource": "containerResource", "Pods": "pods",
           "Object": "object", "External": "external"}.get(t or "")
    if key is None:
        return copy.deepcopy(m)
    src = m.get(key) or {}
    if key in ("resource", "containerResource"):
        body = {"name": src.get("name"), "container": src.get("container"),
                "current": _drop_none({"averageUtilization": src.get("currentAverageUtilization"),
                                       "averageValue": src.get("currentAverageValue")})}
    elif key == "pods":
        body = {"metric": _drop_none({"name": src.get("metricName"), "selector": src.get("selector")}),
                "current": _drop_none({"averageValue": src.get("currentAverageValue")})}
    elif key == "object":
        body = {"describedObject": src.get("target"),
                "metric": _drop_none({"name": src.get("metricName"), "selector": src.get("selector")}),
                "current": _drop_none({"value": src.get("currentValue"),
                                       "averageValue": src.get("averageValue")})}
    else:
        body = {"metric": _drop_none({"name": src.get("metricName"), "selector": src.get("metricSelector")}),
                "current": _drop_none({"value": src.get("currentValue"),
                                       "averageValue": src.get("currentAverageValue")})}
    return {"type": t, key: _drop_none(body)}


# -- whole objects --------------------------------------------------------------------------------
def to_v1(obj: dict[str, Any]) -> dict[str, Any]:
    """A stored (v2) HorizontalPodAutoscaler as autoscaling/v1 serves it."""
    v2spec, v2st = obj.get("spec") or {}, obj.get("status") or {}
    meta = copy.deepcopy(obj.get("metadata") or {})
    ann = dict(meta.get("annotations") or {})
    metrics = v2spec.get("metrics") or []
    spec: dict[str, Any] = {"scaleTargetRef": copy.deepcopy(v2spec.get("scaleTargetRef") or {})}
    if v2spec.get("minReplicas") is not None:
        spec["minReplicas"] = v2spec["minReplicas"]
    spec["maxReplicas"] = v2spec.get("maxReplicas", 0)
    cpu = next((m for m in metrics if (m.get("type") == "Resource"
                                       and (m.get("resource") or {}).get("name") == "cpu")), None)
    if cpu is not None and _is_cpu_utilization(cpu):
        spec["targetCPUUtilizationPercentage"] = cpu["resource"]["target"].get("averageUtilization")
    others = [_spec_to_v1(m) for m in metrics if not _is_cpu_utilization(m)]
    if others:
        ann[METRICS] = json.dumps(others, separators=(",", ":"))
    if v2spec.get("behavior"):
        ann[BEHAVIOR] = json.dumps(v2spec["behavior"], separators=(",", ":"))
    status: dict[str, Any] = {}
    for k in ("observedGeneration", "lastScaleTime"):
        if v2st.get(k) is not None:
            status[k] = v2st[k]
    status["currentReplicas"] = v2st.get("currentReplicas", 0)
    status["desiredReplicas"] = v2st.get("desiredReplicas", 0)
    current = v2st.get("currentMetrics") or []
    for m in current:
        if m.get("type") == "Resource" and (m.get("resource") or {}).get("name") == "cpu":
            util = ((m.get("resource") or {}).get("current") or {}).get("averageUtilization")
            if util is not None:
                status["currentCPUUtilizationPercentage"] = util
    if current:
        ann[CURRENT_METRICS] = json.dumps([_status_to_v1(m) for m in current], separators=(",", ":"))
    if v2st.get("conditions"):
        ann[CONDITIONS] = json.dumps(v2st["conditions"], separators=(",", ":"))
    if ann:
        meta["annotations"] = ann
    return {"kind": "HorizontalPodAutoscaler", "apiVersion": V1, "metadata": meta, "spec": spec,
            "status": status}


def _load(ann: dict[str, str], key: str) -> Any:
    raw = ann.pop(key, None)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ConversionError(f"metadata.annotations[{key}]: {e}") from None


def to_v2(obj: dict[str, Any]) -> dict[str, Any]:
    """An autoscaling/v1 HorizontalPodAutoscaler as it is stored (v2)."""
    v1spec, v1st = obj.get("spec") or {}, obj.get("status") or {}
    meta = copy.deepcopy(obj.get("metadata") or {})
    ann = dict(meta.get("annotations") or {})
    spec: dict[str, Any] = {"scaleTargetRef": copy.deepcopy(v1spec.get("scaleTargetRef") or {})}
    if v1spec.get("minReplicas") is not None:
        spec["minReplicas"] = v1spec["minReplicas"]
    if "maxReplicas" in v1spec:
        spec["maxReplicas"] = v1spec["maxReplicas"]
    metrics: list[dict[str, Any]] = []
    if v1spec.get("targetCPUUtilizationPercentage") is not None:
        metrics.append({"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": v1spec["targetCPUUtilizationPercentage"]}}})
    metrics += [_spec_from_v1(m) for m in _load(ann, METRICS) or []]
    if not metrics:
        metrics = [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}}}]
    spec["metrics"] = metrics
    behavior = _load(ann, BEHAVIOR)
    if behavior:
        spec["behavior"] = behavior
    status: dict[str, Any] = {k: v1st[k] for k in ("observedGeneration", "lastScaleTime") if k in v1st}
    status["currentReplicas"] = v1st.get("currentReplicas", 0)
    status["desiredReplicas"] = v1st.get("desiredReplicas", 0)
    current = _load(ann, CURRENT_METRICS)
    if current:
        status["currentMetrics"] = [_status_from_v1(m) for m in current]
    elif v1st.get("currentCPUUtilizationPercentage") is not None:
        status["currentMetrics"] = [{"type": "Resource", "resource": {"name": "cpu", "current": {
            "averageUtilization": v1st["currentCPUUtilizationPercentage"]}}}]
    conditions = _load(ann, CONDITIONS)
    if conditions:
        status["conditions"] = conditions
    if ann:
        meta["annotations"] = ann
    else:
        meta.pop("annotations", None)
    out = {"kind": "HorizontalPodAutoscaler", "apiVersion": V2, "metadata": meta, "spec": spec}
    if obj.get("status") is not None:
        out["status"] = status
    return out

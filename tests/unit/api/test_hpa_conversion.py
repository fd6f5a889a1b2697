"""autoscaling/v1 <-> v2 HorizontalPodAutoscaler conversion, as pkg/apis/autoscaling/v1/conversion.go."""

import json

from nodeagent.api import hpa_conversion as c

REF = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}


def v1(**spec):
    return {"apiVersion": c.V1, "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": REF, "minReplicas": 1, "maxReplicas": 5, **spec}}


def test_kubectl_autoscale_body_round_trips():
    stored = c.to_v2(v1(targetCPUUtilizationPercentage=50))
    assert stored["apiVersion"] == c.V2
    assert stored["spec"]["metrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]
    back = c.to_v1(stored)
    assert back["spec"] == v1(targetCPUUtilizationPercentage=50)["spec"]
    assert "annotations" not in back["metadata"]


def test_no_target_defaults_to_80_percent_cpu():
    stored = c.to_v2(v1())
    assert stored["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 80
    assert c.to_v1(stored)["spec"]["targetCPUUtilizationPercentage"] == 80


def test_other_metrics_behavior_status_travel_in_annotations():
    v2 = {"apiVersion": c.V2, "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
          "spec": {"scaleTargetRef": REF, "maxReplicas": 5,
                   "behavior": {"scaleDown": {"selectPolicy": "Min"}},
                   "metrics": [
                       {"type": "Resource", "resource": {"name": "cpu", "target": {
                           "type": "Utilization", "averageUtilization": 60}}},
                       {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {
                           "type": "AverageValue", "averageValue": "10"}}},
                       {"type": "Resource", "resource": {"name": "memory", "target": {
                           "type": "AverageValue", "averageValue": "100Mi"}}}]},
          "status": {"currentReplicas": 2, "desiredReplicas": 3,
                     "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {
                         "averageUtilization": 70, "averageValue": "350m"}}}],
                     "conditions": [{"type": "AbleToScale", "status": "True"}]}}
    out = c.to_v1(v2)
    assert out["spec"]["targetCPUUtilizationPercentage"] == 60
    assert out["status"] == {"currentReplicas": 2, "desiredReplicas": 3,
                             "currentCPUUtilizationPercentage": 70}
    ann = out["metadata"]["annotations"]
    assert json.loads(ann[c.METRICS]) == [
        {"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "10"}},
        {"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "100Mi"}}]
    assert json.loads(ann[c.CURRENT_METRICS]) == [{"type": "Resource", "resource": {
        "name": "cpu", "currentAverageUtilization": 70, "currentAverageValue": "350m"}}]
    back = c.to_v2(out)
    assert back["spec"] == v2["spec"] and back["status"] == v2["status"]
    assert "annotations" not in back["metadata"]


def test_bad_annotation_is_an_error():
    obj = v1()
    obj["metadata"]["annotations"] = {c.METRICS: "{not json"}
    try:
        c.to_v2(obj)
    except c.ConversionError as e:
        assert c.METRICS in str(e)
    else:
        raise AssertionError("a broken annotation must not be dropped silently")


def test_every_converted_version_has_its_converters():
    from nodeagent.api.resources import STORAGE_VERSION
    from nodeagent.apiserver.versions import CONVERTERS

    assert set(STORAGE_VERSION) == set(CONVERTERS)

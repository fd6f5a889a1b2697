"""autoscaling/v1 HorizontalPodAutoscalers beside v2, one stored object seen through both versions."""

from __future__ import annotations

import json

import pytest

from tests.integration.apiserver.test_kubectl import new_ns

pytestmark = pytest.mark.e2e
V1, V2 = "horizontalpodautoscalers.v1.autoscaling", "horizontalpodautoscalers.v2.autoscaling"


def test_kubectl_autoscale_creates_one_both_versions_see(kubectl):
    ns = new_ns(kubectl)
    kubectl("create", "deployment", "web", "-n", ns, "--image=busybox")
    out = kubectl("autoscale", "deployment", "web", "-n", ns, "--min=2", "--max=5", "--cpu-percent=60")
    assert "horizontalpodautoscaler.autoscaling/web autoscaled" in out
    v1 = json.loads(kubectl("get", V1, "web", "-n", ns, "-o", "json"))
    assert v1["apiVersion"] == "autoscaling/v1"
    assert v1["spec"] == {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                          "minReplicas": 2, "maxReplicas": 5, "targetCPUUtilizationPercentage": 60}
    v2 = json.loads(kubectl("get", V2, "web", "-n", ns, "-o", "json"))
    assert v2["apiVersion"] == "autoscaling/v2"
    assert v2["spec"]["metrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}]
    # one stored object (the HPA controller may write its status between the two reads: not the version)
    assert v2["metadata"]["uid"] == v1["metadata"]["uid"]
    assert "web" in kubectl("get", "hpa", "-n", ns)

    # a v2 change seen through v1; other metrics ride in v1's annotation
    patch = {"spec": {"metrics": [v2["spec"]["metrics"][0], {"type": "Resource", "resource": {
        "name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}}]}}
    kubectl("patch", V2, "web", "-n", ns, "--type=merge", "-p", json.dumps(patch))
    v1 = json.loads(kubectl("get", V1, "web", "-n", ns, "-o", "json"))
    assert json.loads(v1["metadata"]["annotations"]["autoscaling.alpha.kubernetes.io/metrics"]) == [
        {"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "100Mi"}}]
    # and a v1 patch lands in v2 without losing the memory metric
    kubectl("patch", V1, "web", "-n", ns, "--type=merge",
            "-p", '{"spec":{"targetCPUUtilizationPercentage":75,"maxReplicas":7}}')
    v2 = json.loads(kubectl("get", V2, "web", "-n", ns, "-o", "json"))
    assert v2["spec"]["maxReplicas"] == 7
    assert [m["resource"]["name"] for m in v2["spec"]["metrics"]] == ["cpu", "memory"]
    assert v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 75
    assert "annotations" not in v2["metadata"]

    bad = kubectl.run("patch", V1, "web", "-n", ns, "--type=merge", "-p",
                      '{"metadata":{"annotations":{"autoscaling.alpha.kubernetes.io/metrics":"{"}}}',
                      check=False)
    assert bad.returncode != 0 and "autoscaling.alpha.kubernetes.io/metrics" in bad.stderr
    out = kubectl("delete", V1, "web", "-n", ns)
    assert 'horizontalpodautoscaler.autoscaling "web" deleted' in out
    assert "No resources found" in kubectl.run("get", "hpa", "-n", ns).stderr

"""The official Python `kubernetes` client, unchanged, against a real `nodeagent server`."""

from __future__ import annotations

import threading
import uuid

import pytest

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, config, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

pytestmark = pytest.mark.e2e


@pytest.fixture
def api(server):
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(server.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as c:
        yield c


def test_list_create_patch_delete(api):
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    ns = f"py-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    assert ns in [n.metadata.name for n in core.list_namespace().items if n.metadata]
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="p1", labels={"app": "a"}),
                       spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]))
    created = core.create_namespaced_pod(ns, pod)
    assert created.metadata and created.spec and created.status
    assert created.metadata.uid and created.spec.containers[0].image_pull_policy == "Always"
    assert created.status.phase == "Pending"
    patched = core.patch_namespaced_pod("p1", ns, {"metadata": {"labels": {"tier": "x"}}})
    assert patched.metadata
    assert patched.metadata.labels == {"app": "a", "tier": "x"}
    # list body -> JSON patch
    patched = core.patch_namespaced_pod("p1", ns,
                                        [{"op": "replace", "path": "/metadata/labels/app", "value": "b"}])
    assert patched.metadata and patched.metadata.labels
    assert patched.metadata.labels["app"] == "b"
    pods = core.list_namespaced_pod(ns, label_selector="app=b").items
    assert [p.metadata and p.metadata.name for p in pods] == ["p1"]
    assert core.list_namespaced_pod(ns, label_selector="app=a").items == []
    dep = apps.create_namespaced_deployment(ns, client.V1Deployment(
        api_version="apps/v1", kind="Deployment", metadata=client.V1ObjectMeta(name="d"),
        spec=client.V1DeploymentSpec(
            replicas=2, selector=client.V1LabelSelector(match_labels={"app": "d"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "d"}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="nginx:1.25")])))))
    assert dep.spec and dep.spec.replicas == 2
    scale = apps.patch_namespaced_deployment_scale("d", ns, {"spec": {"replicas": 4}})
    assert scale.spec and scale.spec.replicas == 4
    apps.delete_namespaced_deployment("d", ns)
    core.delete_namespaced_pod("p1", ns)
    with pytest.raises(ApiException) as e:
        core.read_namespaced_pod("p1", ns)
    assert e.value.status == 404
    with pytest.raises(ApiException) as e:
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="BAD")))
    assert e.value.status == 422


def test_watch_stream(api):
    core = client.CoreV1Api(api)
    ns = f"pyw-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    listed = core.list_namespaced_config_map(ns).metadata
    assert listed
    rv = listed.resource_version
    seen: list[tuple[str, str]] = []
    done = threading.Event()

    def watcher() -> None:
        w = watch.Watch()
        for ev in w.stream(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=10):
            if ev["object"].metadata.name != "c1":  # the namespace's kube-root-ca.crt, published meanwhile
                continue
            seen.append((ev["type"], ev["object"].metadata.name))
            if len(seen) == 3:
                w.stop()
        done.set()

    t = threading.Thread(target=watcher)
    t.start()
    core.create_namespaced_config_map(ns,
                                      client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c1"),
                                                         data={"a": "1"}))
    core.patch_namespaced_config_map("c1", ns, {"data": {"a": "2"}})
    core.delete_namespaced_config_map("c1", ns)
    assert done.wait(15)
    t.join()
    assert seen == [("ADDED", "c1"), ("MODIFIED", "c1"), ("DELETED", "c1")]


def test_eviction_honours_a_budget_and_autoscaling_v1(api):
    """pods/eviction answers the client 429 while the budget allows no disruption (the disruption
    controller writes its status), then evicts; an autoscaling/v1 HPA reads back through both versions."""
    import json
    import time

    core, policy, hpa = client.CoreV1Api(api), client.PolicyV1Api(api), client.AutoscalingV1Api(api)
    ns = f"py-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    core.create_namespaced_pod(ns, client.V1Pod(
        metadata=client.V1ObjectMeta(name="p", labels={"app": "e"}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")])))
    core.patch_namespaced_pod_status("p", ns, {"status": {
        "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    policy.create_namespaced_pod_disruption_budget(ns, client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="b"), spec=client.V1PodDisruptionBudgetSpec(
            min_available=1, selector=client.V1LabelSelector(match_labels={"app": "e"}))))

    def budget(**want):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            st = policy.read_namespaced_pod_disruption_budget_status("b", ns).status
            if st and all(getattr(st, k) == v for k, v in want.items()):
                return st
            time.sleep(0.2)
        raise AssertionError(f"budget status never reached {want}")

    st = budget(current_healthy=1, desired_healthy=1, expected_pods=1, disruptions_allowed=0)
    assert st.conditions and st.conditions[0].reason == "InsufficientPods"
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="p", namespace=ns))
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod_eviction("p", ns, eviction)
    assert e.value.status == 429
    body = json.loads(e.value.body or "{}")
    assert body["reason"] == "TooManyRequests"
    assert body["details"]["causes"] == [{"reason": "DisruptionBudget",
                                          "message": "The disruption budget b needs 1 healthy pods and has "
                                                     "1 currently"}]
    policy.patch_namespaced_pod_disruption_budget("b", ns, {"spec": {"minAvailable": 0}})
    budget(disruptions_allowed=1, observed_generation=2)
    core.create_namespaced_pod_eviction("p", ns, eviction)
    gone = [p for p in core.list_namespaced_pod(ns).items
            if p.metadata and p.metadata.name == "p" and not p.metadata.deletion_timestamp]
    assert gone == []

    made = hpa.create_namespaced_horizontal_pod_autoscaler(ns, client.V1HorizontalPodAutoscaler(
        metadata=client.V1ObjectMeta(name="h"), spec=client.V1HorizontalPodAutoscalerSpec(
            scale_target_ref=client.V1CrossVersionObjectReference(api_version="apps/v1", kind="Deployment",
                                                                  name="d"),
            max_replicas=4, target_cpu_utilization_percentage=70)))
    assert made.spec and made.spec.target_cpu_utilization_percentage == 70 and made.spec.min_replicas == 1
    events = watch.Watch().stream(hpa.list_namespaced_horizontal_pod_autoscaler, ns, timeout_seconds=1)
    seen = [(e["type"], e["object"].api_version, e["object"].spec.target_cpu_utilization_percentage)
            for e in events]
    # the HPA controller may write its status meanwhile (a MODIFIED, in v1 too)
    assert seen[0] == ("ADDED", "autoscaling/v1", 70)
    assert {s[1:] for s in seen} == {("autoscaling/v1", 70)}
    v2 = client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler("h", ns)
    assert v2.spec and v2.spec.metrics and v2.spec.metrics[0].resource
    assert v2.spec.metrics[0].resource.target.average_utilization == 70
    core.delete_namespace(ns)

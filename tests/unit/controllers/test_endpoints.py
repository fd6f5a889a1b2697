from nodeagent.controllers.endpoints import (
    compute_endpoint_slices,
    compute_endpoints,
    pod_state,
    resolve_target_port,
)


def svc(**spec):
    base = {"selector": {"app": "web"}, "clusterIP": "10.96.0.10",
            "ports": [{"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"}]}
    base.update(spec)
    return {"metadata": {"name": "web", "namespace": "default", "uid": "u1"}, "spec": base}


def pod(name, ip, ready=True, labels=None, ns="default", port=8080, deleting=False,
        phase="Running", node="n1"):
    meta = {"name": name, "namespace": ns, "labels": labels if labels is not None else {"app": "web"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": "c", "ports": [
                {"name": "web", "containerPort": port, "protocol": "TCP"}]}]},
            "status": {"phase": phase, "podIP": ip,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_named_target_port_resolves_per_pod():
    ep = compute_endpoints(svc(), [pod("a", "10.0.0.2", port=8080), pod("b", "10.0.0.3", port=9090)])
    assert ep is not None
    by_port = {s["ports"][0]["port"]: [a["ip"] for a in s["addresses"]] for s in ep["subsets"]}
    assert by_port == {8080: ["10.0.0.2"], 9090: ["10.0.0.3"]}
    assert ep["subsets"][0]["ports"][0]["name"] == "http"


def test_numeric_and_missing_target_port():
    assert resolve_target_port({"port": 80}, pod("a", "1.1.1.1")) == 80
    assert resolve_target_port({"port": 80, "targetPort": 8443}, pod("a", "1.1.1.1")) == 8443
    assert resolve_target_port({"port": 80, "targetPort": "nope"}, pod("a", "1.1.1.1")) is None
    udp = {"port": 80, "targetPort": "web", "protocol": "UDP"}
    assert resolve_target_port(udp, pod("a", "1.1.1.1")) is None


def test_ready_not_ready_and_terminating():
    pods = [pod("a", "10.0.0.2"), pod("b", "10.0.0.3", ready=False), pod("c", "10.0.0.4", deleting=True),
            pod("d", "10.0.0.5", phase="Succeeded"), pod("e", "", ready=True),
            pod("f", "10.0.0.6", labels={}),
            pod("g", "10.0.0.7", ns="other")]
    ep = compute_endpoints(svc(), pods)
    assert ep is not None
    (subset,) = ep["subsets"]
    assert [a["ip"] for a in subset["addresses"]] == ["10.0.0.2"]
    assert [a["ip"] for a in subset["notReadyAddresses"]] == ["10.0.0.3"]
    assert subset["addresses"][0]["targetRef"] == {"kind": "Pod", "namespace": "default", "name": "a"}
    slices = compute_endpoint_slices(svc(), pods)
    assert slices is not None
    (sl,) = slices
    conds = {e["addresses"][0]: e["conditions"] for e in sl["endpoints"]}
    assert conds == {
        "10.0.0.2": {"ready": True, "serving": True, "terminating": False},
        "10.0.0.3": {"ready": False, "serving": False, "terminating": False},
        "10.0.0.4": {"ready": False, "serving": True, "terminating": True},
    }
    assert sl["metadata"]["labels"]["kubernetes.io/service-name"] == "web"
    assert sl["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    assert sl["endpoints"][0]["nodeName"] == "n1"


def test_publish_not_ready_addresses():
    assert pod_state(svc(publishNotReadyAddresses=True), pod("b", "1.1.1.1", ready=False)) == (
        True, True, False)


def test_headless_service_gets_endpoints_and_label():
    s = svc(clusterIP="None", ports=[])
    ep = compute_endpoints(s, [pod("a", "10.0.0.2")])
    assert ep is not None and ep["subsets"] == [{"addresses": [{"ip": "10.0.0.2", "nodeName": "n1",
                                             "targetRef": {"kind": "Pod", "namespace": "default",
                                                           "name": "a"}}]}]
    slices = compute_endpoint_slices(s, [pod("a", "10.0.0.2")])
    assert slices is not None
    (sl,) = slices
    assert sl["ports"] == [] and sl["metadata"]["labels"]["service.kubernetes.io/headless"] == ""


def test_selectorless_service_is_not_managed_and_empty_gets_placeholder():
    assert compute_endpoints(svc(selector={}), [pod("a", "1.1.1.1")]) is None
    assert compute_endpoint_slices(svc(selector=None), []) is None
    slices = compute_endpoint_slices(svc(), [])
    assert slices is not None
    (sl,) = slices
    assert sl["endpoints"] == [] and sl["ports"] == []


def test_slices_chunk_and_names_are_stable():
    pods = [pod(f"p{i}", f"10.0.{i // 250}.{i % 250 + 1}") for i in range(250)]
    a = compute_endpoint_slices(svc(), pods, max_per_slice=100)
    b = compute_endpoint_slices(svc(), list(reversed(pods)), max_per_slice=100)
    assert a is not None
    assert [len(s["endpoints"]) for s in a] == [100, 100, 50]
    assert a == b
    assert len({s["metadata"]["name"] for s in a}) == 3

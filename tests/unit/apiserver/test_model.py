"""Validation, defaults, QoS, tables, protobuf decoding, allocators: pure logic."""

from typing import Any

from nodeagent.api.defaults import apply_defaults, image_pull_policy
from nodeagent.api.qos import compute_pod_qos
from nodeagent.api.resources import lookup
from nodeagent.api.validation import validate
from nodeagent.apiserver import protobuf, table
from nodeagent.apiserver.allocator import Allocators


def test_names_and_labels_validated_like_kubernetes():
    ok = {"metadata": {"name": "web-1", "labels": {"app.kubernetes.io/name": "x_y.z"}}}
    assert validate(ok, "ConfigMap", True) == []
    errs = validate({"metadata": {"name": "Web_1"}}, "ConfigMap", True)
    assert errs[0]["field"] == "metadata.name" and "RFC 1123 subdomain" in errs[0]["message"]
    assert validate({"metadata": {"name": "a.b"}}, "Namespace", False)  # labels only for namespaces
    assert validate({"metadata": {"name": "1abc"}}, "Service", True)  # DNS-1035 for services
    errs = validate({"metadata": {"name": "x", "labels": {"bad key!": "v", "k": "-v"}}}, "Pod", True)
    assert {e["field"] for e in errs} >= {"metadata.labels", "spec.containers"}
    assert validate({"metadata": {"generateName": "x-"}}, "ConfigMap", True) == []


def test_pod_and_deployment_rules():
    pod = {"metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "image": "i"}, {"name": "c", "image": "i"}]}}
    assert any(e["reason"] == "FieldValueDuplicate" for e in validate(pod, "Pod", True))
    template = {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    dep = {"metadata": {"name": "d"},
           "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": template}}
    errs = validate(dep, "Deployment", True)
    assert errs and "does not match template" in errs[0]["message"]


def test_defaults():
    assert image_pull_policy("nginx") == "Always"
    assert image_pull_policy("nginx:latest") == "Always"
    assert image_pull_policy("nginx:1.25") == "IfNotPresent"
    assert image_pull_policy("reg:5000/nginx") == "Always"
    assert image_pull_policy("nginx@sha256:abc") == "IfNotPresent"
    container = {"name": "c", "image": "i:1", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}
    pod: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {"containers": [container]}}
    apply_defaults(pod, "Pod")
    s = pod["spec"]
    assert (s["restartPolicy"], s["dnsPolicy"], s["terminationGracePeriodSeconds"]) == (
        "Always", "ClusterFirst", 30)
    assert {t["key"]: t["tolerationSeconds"] for t in s["tolerations"]} == {
        "node.kubernetes.io/not-ready": 300, "node.kubernetes.io/unreachable": 300}
    assert s["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert pod["status"]["qosClass"] == "Guaranteed"
    svc: dict[str, Any] = {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}
    apply_defaults(svc, "Service")
    assert svc["spec"]["ports"][0] == {"port": 80, "protocol": "TCP", "targetPort": 80}


def test_qos():
    assert compute_pod_qos({"spec": {"containers": [{"name": "c"}]}}) == "BestEffort"
    burstable = {"spec": {"containers": [{"resources": {"requests": {"cpu": "100m"}}}]}}
    assert compute_pod_qos(burstable) == "Burstable"


def test_table_columns_and_durations():
    assert [c["name"] for c in table.columns("Pod")][:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert table.human_duration(45) == "45s" and table.human_duration(185) == "3m5s"
    assert table.human_duration(3 * 3600 + 240) == "3h4m" and table.human_duration(50 * 3600) == "2d2h"
    pod = {"metadata": {"name": "p", "deletionTimestamp": "x"}, "spec": {"containers": [{"name": "c"}]},
           "status": {"phase": "Running", "containerStatuses": [{"ready": True, "restartCount": 2,
                                                                 "state": {"running": {}}}]}}
    row = table.rows("Pod", [pod])[0]
    assert row["cells"][:4] == ["p", "1/1", "Terminating", "2"]
    assert row["object"]["kind"] == "PartialObjectMetadata"


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def _f(num: int, val: bytes | str | int) -> bytes:
    if isinstance(val, int):
        return _varint(num << 3) + _varint(val)
    if isinstance(val, str):
        val = val.encode()
    return _varint(num << 3 | 2) + _varint(len(val)) + val


def test_protobuf_configmap_decodes():
    meta = _f(1, "cm1") + _f(11, _f(1, "app") + _f(2, "x"))
    cm = _f(1, meta) + _f(2, _f(1, "a") + _f(2, "b")) + _f(2, _f(1, "c") + _f(2, "d"))
    envelope = protobuf.MAGIC + _f(1, _f(1, "v1") + _f(2, "ConfigMap")) + _f(2, cm)
    obj = protobuf.decode(envelope, lookup("", "v1", "configmaps"))
    assert obj == {"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "cm1", "labels": {"app": "x"}},
                   "data": {"a": "b", "c": "d"}}


def test_allocator_conflicts_and_release():
    a = Allocators("10.96.0.0/24", (30000, 30010))
    s1: dict[str, Any] = {"metadata": {"name": "a", "namespace": "d"},
                          "spec": {"type": "NodePort", "ports": [{"port": 80}]}}
    assert a.allocate(s1) == []
    ip, np = s1["spec"]["clusterIP"], s1["spec"]["ports"][0]["nodePort"]
    assert ip.startswith("10.96.0.") and 30000 <= np <= 30010
    s2 = {"metadata": {"name": "b", "namespace": "d"},
          "spec": {"type": "NodePort", "clusterIP": ip, "ports": [{"port": 80, "nodePort": np}]}}
    errs = a.allocate(s2)
    assert [e["field"] for e in errs] == ["spec.clusterIPs[0]"]
    s2["spec"].pop("clusterIP")
    errs = a.allocate(s2)
    assert "already allocated" in errs[0]["message"]
    a.release(s1)
    assert a.allocate(s2) == []


def test_aggregated_discovery():
    from nodeagent.apiserver import discovery

    accept = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
              "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")
    assert discovery.wants_aggregated(accept) == discovery.AGGREGATED_V2
    assert discovery.wants_aggregated("application/json, */*") is None
    doc = discovery.aggregated(True, discovery.AGGREGATED_V2)
    assert [i["metadata"]["name"] for i in doc["items"]] == [""]
    pods = next(r for r in doc["items"][0]["versions"][0]["resources"] if r["resource"] == "pods")
    ev = next(s for s in pods["subresources"] if s["subresource"] == "eviction")
    assert ev["responseKind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    assert pods["scope"] == "Namespaced" and pods["shortNames"] == ["po"]
    groups = [i["metadata"]["name"] for i in discovery.aggregated(False, discovery.AGGREGATED_V2)["items"]]
    assert "apps" in groups and "" not in groups


def test_serving_cert_names(tmp_path):
    from cryptography import x509

    from nodeagent.apiserver import pki

    crt, _ = pki.ensure_serving_cert(tmp_path, ["10.96.0.1", "192.0.2.7"])
    cert = x509.load_pem_x509_certificate(crt.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = {str(i) for i in san.get_values_for_type(x509.IPAddress)}
    assert {"10.96.0.1", "192.0.2.7", "127.0.0.1"} <= ips
    assert "kubernetes.default.svc" in san.get_values_for_type(x509.DNSName)
    before = crt.read_bytes()
    pki.ensure_serving_cert(tmp_path, ["10.96.0.1"])  # already covered: kept
    assert crt.read_bytes() == before
    pki.ensure_serving_cert(tmp_path, ["198.51.100.1"])  # a new address: reissued by the same CA
    assert crt.read_bytes() != before

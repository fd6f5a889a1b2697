"""OpenAPI documents and schema validation, seen by real clients: kubectl 1.20 and 1.32 explain and apply,
the Python client, and the raw HTTP contract (content negotiation, ETags, the v3 `?hash=` URLs)."""

from __future__ import annotations

import http.client
import json
import ssl
import time
import uuid
from typing import Any

import pytest

from nodeagent.apiserver import protobuf
from tests.integration.apiserver.http import call

pytestmark = pytest.mark.e2e

WIDGETS = "widgets.openapi.example.com"
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": WIDGETS},
    "spec": {"group": "openapi.example.com", "scope": "Namespaced",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "description": "A widget, for testing.",
                 "properties": {"spec": {
                     "type": "object", "description": "What the widget is.", "required": ["size"],
                     "x-kubernetes-validations": [{"rule": "self.size != 7", "message": "seven is unlucky"},
                                                  {"rule": "self.color == oldSelf.color",
                                                   "message": "color is immutable"}],
                     "properties": {
                         "size": {"type": "integer", "minimum": 1, "maximum": 10,
                                  "description": "How big it is."},
                         "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                         "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                         "port": {"x-kubernetes-int-or-string": True},
                         "note": {"type": "string", "nullable": True},
                         "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                         "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                         "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                         "template": {"type": "object", "x-kubernetes-embedded-resource": True,
                                      "x-kubernetes-preserve-unknown-fields": True}}}}}}}]}}

BAD_POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  foo: bar
  containers:
  - name: c
    image: busybox
"""


def raw(server, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
        ) -> tuple[int, dict[str, str], bytes]:
    """One request, redirects not followed; (status, headers with lower-case names, body)."""
    ctx = ssl.create_default_context(cafile=str(server.ca_file))
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=30)
    hdrs = {"Authorization": f"Bearer {server.token}", **(headers or {})}
    data = json.dumps(body).encode() if body is not None else None
    if data is not None:
        hdrs.setdefault("Content-Type", "application/json")
    conn.request(method, path, body=data, headers=hdrs)
    r = conn.getresponse()
    out = r.read()
    got: dict[str, str] = {}
    for k, v in r.getheaders():
        got[k.lower()] = f"{got[k.lower()]}, {v}" if k.lower() in got else v
    conn.close()
    return r.status, got, out


@pytest.fixture(scope="module")
def widgets(server):
    code, _ = call(server, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    assert code == 201
    deadline = time.monotonic() + 30
    while call(server, "GET", "/apis/openapi.example.com/v1")[0] != 200:
        assert time.monotonic() < deadline, "the CRD's group-version was never served"
        time.sleep(0.1)
    return "/apis/openapi.example.com/v1/namespaces/default/widgets"


def test_explain_builtin_kinds(kubectl):
    out = kubectl("explain", "pod.spec")
    assert "KIND:" in out and "Pod" in out
    assert "containers" in out and "-required-" in out
    assert "List of containers belonging to the pod." in kubectl("explain", "pod.spec.containers")
    out = kubectl("explain", "deployment.spec.strategy")
    assert "rollingUpdate" in out and "Type of deployment." in out


def test_explain_custom_resource(kubectl, widgets):
    out = kubectl("explain", "widget.spec")
    assert "What the widget is." in out
    assert "size" in out and "How big it is." in out and "-required-" in out
    odd = ('{"apiVersion": "openapi.example.com/v1", "kind": "Widget", "metadata": {"name": "odd"}, '
           '"spec": {"size": 2, "shape": "round"}}')
    p = kubectl.run("apply", "-f", "-", input=odd, check=False)
    assert p.returncode != 0
    if kubectl.version == "1.20":  # client-side, from the CRD's definition in /openapi/v2
        assert 'unknown field "shape" in com.example.openapi.v1.Widget.spec' in p.stderr, p.stderr
    else:
        assert 'strict decoding error: unknown field "spec.shape"' in p.stderr, p.stderr


def test_apply_refuses_unknown_fields_and_creates_nothing(kubectl):
    name = f"bad-{uuid.uuid4().hex[:6]}"
    p = kubectl.run("apply", "-f", "-", input=BAD_POD.format(name=name), check=False)
    assert p.returncode != 0
    if kubectl.version == "1.20":  # client-side, from /openapi/v2
        assert 'unknown field "foo" in io.k8s.api.core.v1.PodSpec' in p.stderr, p.stderr
    else:  # server-side, fieldValidation=Strict
        assert ('Error from server (BadRequest): error when creating "STDIN": Pod in version "v1" cannot be '
                'handled as a Pod: strict decoding error: unknown field "spec.foo"') in p.stderr, p.stderr
    assert kubectl.run("get", "pod", name, check=False).returncode != 0
    p = kubectl.run("apply", "--validate=false", "-f", "-", input=BAD_POD.format(name=name))
    assert f"pod/{name} created" in p.stdout
    kubectl("delete", "pod", name, "--wait=false")


def test_field_validation_directives(server):
    ns_pods = "/api/v1/namespaces/default/pods"
    name = f"fv-{uuid.uuid4().hex[:6]}"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [{"name": "c", "image": "busybox", "bogus": 1}], "foo": "bar"}}
    code, _, body = raw(server, "POST", ns_pods + "?fieldValidation=Strict", pod)
    st = json.loads(body)
    assert (code, st["reason"]) == (400, "BadRequest")
    assert st["message"] == ('Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
                             'unknown field "spec.containers[0].bogus", unknown field "spec.foo"')
    code, _, body = raw(server, "POST", ns_pods + "?fieldValidation=Sometimes", pod)
    st = json.loads(body)
    assert (code, st["reason"]) == (422, "Invalid")
    assert st["details"]["causes"][0]["field"] == "fieldValidation"
    code, hdrs, _ = raw(server, "POST", ns_pods, pod)  # Warn is the default
    assert code == 201
    assert hdrs["warning"] == ('299 - "unknown field \\"spec.containers[0].bogus\\"", '
                               '299 - "unknown field \\"spec.foo\\""')
    code, _, body = raw(server, "GET", f"{ns_pods}/{name}")
    stored = json.loads(body)
    assert "foo" not in stored["spec"] and "bogus" not in stored["spec"]["containers"][0]  # dropped
    code, _, body = raw(server, "PATCH", f"{ns_pods}/{name}?fieldValidation=Strict",
                        {"spec": {"activeDeadlineSecs": 5}},
                        {"Content-Type": "application/strategic-merge-patch+json"})
    st = json.loads(body)
    assert (code, st["reason"]) == (422, "Invalid")
    assert st["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "patch",
        "message": 'Invalid value: "map[spec:map[activeDeadlineSecs:5]]": strict decoding error: '
                   'unknown field "spec.activeDeadlineSecs"'}]
    code, hdrs, out = raw(server, "PATCH", f"{ns_pods}/{name}?fieldValidation=Ignore",
                        {"metadata": {"labels": {"a": "b"}, "zzz": 1}},
                        {"Content-Type": "application/merge-patch+json"})
    assert code == 200 and "warning" not in hdrs
    patched = json.loads(out)["metadata"]
    assert "zzz" not in patched and patched["labels"] == {"a": "b"}
    raw(server, "DELETE", f"{ns_pods}/{name}")


def test_wrong_json_types_and_apply_unknown_fields_refused_whatever_the_directive(server):
    deps = "/apis/apps/v1/namespaces/default/deployments"
    pod_spec = {"containers": [{"name": "c", "image": "busybox"}]}
    dep: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "typed"},
                           "spec": {"replicas": "3", "selector": {"matchLabels": {"a": "b"}},
                                    "template": {"metadata": {"labels": {"a": "b"}}, "spec": pod_spec}}}
    code, _, body = raw(server, "POST", deps + "?fieldValidation=Ignore", dep)
    assert code == 400 and json.loads(body)["message"] == (
        'Deployment in version "v1" cannot be handled as a Deployment: json: cannot unmarshal string into '
        "Go struct field DeploymentSpec.spec.replicas of type int32")
    dep["spec"]["replicas"] = 1
    dep["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "bogus": 1}]
    code, _, body = raw(server, "PATCH", deps + "/typed?fieldManager=me&fieldValidation=Ignore", dep,
                        {"Content-Type": "application/apply-patch+yaml"})
    assert code == 500 and json.loads(body)["message"] == (
        "failed to create typed patch object (apps/v1, Kind=Deployment): "
        ".spec.template.spec.containers[0].ports[0].bogus: field not declared in schema")
    assert raw(server, "GET", deps + "/typed")[0] == 404


def test_custom_objects_validated_pruned_defaulted(server, widgets):
    bad = {"apiVersion": "openapi.example.com/v1", "kind": "Widget", "metadata": {"name": "bad"},
           "spec": {"size": 0, "color": "green", "name": "Has-Caps", "tags": ["a", "b", "c"], "port": 1.5,
                    "template": {"metadata": {}}}}
    code, body = call(server, "POST", widgets, bad)
    assert (code, body["reason"]) == (422, "Invalid")
    causes = {c["field"]: (c["reason"], c["message"]) for c in body["details"]["causes"]}
    assert causes["spec.size"] == ("FieldValueInvalid",
                                   "Invalid value: 0: spec.size in body should be greater than or equal to 1")
    assert causes["spec.color"] == ("FieldValueNotSupported",
                                    'Unsupported value: "green": supported values: "red", "blue"')
    assert causes["spec.name"] == ("FieldValueInvalid",
                                   'Invalid value: "Has-Caps": spec.name in body should match \'^[a-z]+$\'')
    assert causes["spec.tags"] == ("FieldValueTooMany", "Too many: 3: must have at most 2 items")
    assert causes["spec.port"][0] == "FieldValueTypeInvalid"
    assert causes["spec.template.apiVersion"] == ("FieldValueRequired", "Required value: must not be empty")
    assert body["message"].startswith('Widget.openapi.example.com "bad" is invalid: [')
    code, body = call(server, "POST", widgets, {"apiVersion": "openapi.example.com/v1", "kind": "Widget",
                                                "metadata": {"name": "nosize"}, "spec": {}})
    assert code == 422 and body["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.size"}]
    assert call(server, "GET", widgets + "/bad")[0] == 404
    good = {"apiVersion": "openapi.example.com/v1", "kind": "Widget", "metadata": {"name": "good"},
            "spec": {"size": 3, "port": "http", "note": None, "extra": 1, "free": {"any": {"thing": 1}},
                     "labels": {"k": "v"}},
            "status": {"whatever": True}}
    code, obj = call(server, "POST", widgets, good)
    assert code == 201, obj
    assert obj["spec"] == {"size": 3, "port": "http", "note": None, "color": "red",
                           "free": {"any": {"thing": 1}}, "labels": {"k": "v"}}
    assert "status" not in obj  # not in the schema: pruned
    code, obj = call(server, "PUT", widgets + "/good", {**obj, "spec": {"size": 11, "bogus": 1}})
    assert code == 422 and [c["field"] for c in obj["details"]["causes"]] == ["spec.size"]
    code, obj = call(server, "GET", widgets + "/good")
    assert obj["spec"]["size"] == 3
    code, _, body = raw(server, "POST", widgets + "?fieldValidation=Strict",
                        {**good, "metadata": {"name": "strict"}})
    assert code == 400 and json.loads(body)["message"] == (
        'Widget in version "v1" cannot be handled as a Widget: strict decoding error: '
        'unknown field "spec.extra", unknown field "status"')
    call(server, "DELETE", widgets + "/good")


def test_custom_objects_take_no_strategic_merge_patch(server, widgets):
    """kube's CRD handler accepts JSON patch, merge patch and apply, never a strategic merge patch (a custom
    object has no patch strategies); built-in kinds take all four, in kube's order."""
    obj = {"apiVersion": "openapi.example.com/v1", "kind": "Widget", "metadata": {"name": "smp"},
           "spec": {"size": 2}}
    assert call(server, "POST", widgets, obj)[0] == 201
    try:
        code, _, body = raw(server, "PATCH", widgets + "/smp", {"spec": {"size": 4}},
                            {"Content-Type": "application/strategic-merge-patch+json"})
        assert (code, json.loads(body)["reason"], json.loads(body)["message"]) == (
            415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted media "
            "types include: application/json-patch+json, application/merge-patch+json, "
            "application/apply-patch+yaml")
        assert call(server, "GET", widgets + "/smp")[1]["spec"]["size"] == 2
        code, _, body = raw(server, "PATCH", widgets + "/smp", {"spec": {"size": 4}},
                            {"Content-Type": "application/merge-patch+json"})
        assert code == 200 and json.loads(body)["spec"]["size"] == 4
        code, _, body = raw(server, "PATCH", "/api/v1/namespaces/default/configmaps/nothing", {},
                            {"Content-Type": "application/x-unknown"})
        assert code == 415 and json.loads(body)["message"].endswith(
            "application/json-patch+json, application/merge-patch+json, "
            "application/strategic-merge-patch+json, application/apply-patch+yaml")
    finally:
        call(server, "DELETE", widgets + "/smp")


def test_validation_rules_and_structural_crds(server, widgets, kubectl):
    seven = ('{"apiVersion": "openapi.example.com/v1", "kind": "Widget", "metadata": {"name": "seven"}, '
             '"spec": {"size": 7}}')
    p = kubectl.run("create", "-f", "-", input=seven, check=False)
    assert p.returncode != 0
    unlucky = 'The Widget "seven" is invalid: spec: Invalid value: "object": seven is unlucky'
    assert unlucky in p.stderr, p.stderr
    name = f"w{uuid.uuid4().hex[:6]}"
    other = seven.replace('"seven"', f'"{name}"').replace('"size": 7', '"size": 2')
    kubectl("create", "-f", "-", input=other)
    p = kubectl.run("patch", "widget", name, "--type=merge", "-p", '{"spec":{"color":"blue"}}', check=False)
    assert "color is immutable" in p.stderr, p.stderr
    assert kubectl("get", "widget", name, "-o", "jsonpath={.spec.color}") == "red"
    kubectl("delete", "widget", name)
    bad = json.loads(json.dumps(CRD))
    bad["metadata"]["name"] = "gadgets.openapi.example.com"
    bad["spec"]["names"] = {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"}
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["x"] = {}
    code, st = call(server, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", bad)
    assert code == 422 and st["details"]["causes"] == [{
        "reason": "FieldValueRequired",
        "field": "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[x].type",
        "message": "Required value: must not be empty for specified object fields"}]
    assert call(server, "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                               "gadgets.openapi.example.com")[0] == 404


def test_python_client_sees_the_causes(server, widgets):
    kubernetes = pytest.importorskip("kubernetes")
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(server.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        custom = client.CustomObjectsApi(api)
        with pytest.raises(ApiException) as e:
            custom.create_namespaced_custom_object("openapi.example.com", "v1", "default", "widgets",
                                                   {"apiVersion": "openapi.example.com/v1", "kind": "Widget",
                                                    "metadata": {"name": "py"}, "spec": {"size": 99}})
        assert e.value.status == 422
        st = json.loads(e.value.body or "{}")
        assert st["details"]["causes"][0]["field"] == "spec.size"
        with pytest.raises(ApiException) as e:
            custom.create_namespaced_custom_object("openapi.example.com", "v1", "default", "widgets",
                                                   {"apiVersion": "openapi.example.com/v1", "kind": "Widget",
                                                    "metadata": {"name": "py"},
                                                    "spec": {"size": 1, "nope": 1}},
                                                   field_validation="Strict")
        assert e.value.status == 400
        assert json.loads(e.value.body or "{}")["message"].endswith('unknown field "spec.nope"')
    del kubernetes


def test_openapi_v3_index_hashes_and_etags(server, widgets):
    code, hdrs, body = raw(server, "GET", "/openapi/v3")
    assert code == 200 and hdrs["content-type"] == "application/json" and hdrs["etag"].startswith('"')
    paths = json.loads(body)["paths"]
    assert {"api/v1", "apis/apps/v1", "apis/openapi.example.com/v1"} <= set(paths)
    url = paths["apis/openapi.example.com/v1"]["serverRelativeURL"]
    code, hdrs, body = raw(server, "GET", url)
    assert code == 200 and hdrs["cache-control"] == "public, immutable" and "expires" in hdrs
    doc = json.loads(body)
    assert "com.example.openapi.v1.Widget" in doc["components"]["schemas"]
    patch = doc["paths"]["/apis/openapi.example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"]
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    code, again, _ = raw(server, "GET", url, headers={"If-None-Match": hdrs["etag"]})
    assert code == 304
    code, moved, _ = raw(server, "GET", url.split("?")[0] + "?hash=STALE")
    assert code == 301 and moved["location"] == url
    code, plain, _ = raw(server, "GET", url.split("?")[0])
    assert code == 200 and "cache-control" not in plain
    assert raw(server, "GET", "/openapi/v3/apis/nope/v9")[0] == 404


def test_openapi_v2_json_and_protobuf(server):
    code, hdrs, body = raw(server, "GET", "/openapi/v2", headers={"Accept": "application/json"})
    assert code == 200 and hdrs["content-type"] == "application/json"
    doc = json.loads(body)
    assert doc["definitions"]["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"] == [
        {"group": "", "kind": "Pod", "version": "v1"}]
    # what client-go asks: the '@' name, answered with the '.v1.0' content type Go can parse
    code, hdrs, pb = raw(server, "GET", "/openapi/v2",
                         headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"})
    assert code == 200
    assert hdrs["content-type"] == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    top = {num: v for num, _, v in protobuf.fields(pb)}
    assert top[1] == b"2.0"
    names = [protobuf.fields(named)[0][2].decode() for _, _, named in protobuf.fields(top[9])]
    assert sorted(names) == sorted(doc["definitions"])
    code, json_hdrs, _ = raw(server, "GET", "/openapi/v2", headers={"Accept": "application/json"})
    assert json_hdrs["etag"] != hdrs["etag"]  # each form has its own
    code, _, _ = raw(server, "GET", "/openapi/v2", headers={"Accept": "application/json",
                                                           "If-None-Match": json_hdrs["etag"]})
    assert code == 304
    code, _, _ = raw(server, "GET", "/openapi/v2", headers={"Accept": "text/html"})
    assert code == 406

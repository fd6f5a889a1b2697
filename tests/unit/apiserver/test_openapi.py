"""The OpenAPI documents: custom kinds' documents, the v3 -> v2 conversion, the gnostic protobuf encoding,
content negotiation, and the decoder's view of built-in kinds (unknown fields, wrong JSON types)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodeagent.api.resources import Resource, builtin
from nodeagent.api.schema import DecodeError
from nodeagent.apiserver import field_validation, openapi, openapi_http, openapi_proto, openapi_v2
from nodeagent.apiserver.protobuf import fields

WIDGET = Resource("openapi.example.com", "v1", "widgets", "Widget", True, subresources=("status",),
                  schema={"type": "object", "properties": {"spec": {"type": "object", "properties": {
                      "port": {"x-kubernetes-int-or-string": True}, "size": {"type": "integer"}}}}})


def test_custom_document_named_and_wrapped_as_apiextensions_does():
    (gv, doc), = openapi.custom_documents([WIDGET]).items()
    assert gv == "apis/openapi.example.com/v1"
    schemas = doc["components"]["schemas"]
    w = schemas["com.example.openapi.v1.Widget"]
    assert w["x-kubernetes-group-version-kind"] == [{"group": "openapi.example.com", "kind": "Widget",
                                                     "version": "v1"}]
    assert w["properties"]["metadata"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]
    assert w["properties"]["spec"]["properties"]["port"]["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in schemas
    assert "com.example.openapi.v1.WidgetList" in schemas
    item = doc["paths"]["/apis/openapi.example.com/v1/namespaces/{namespace}/widgets/{name}"]
    assert item["patch"]["x-kubernetes-group-version-kind"]["kind"] == "Widget"
    assert [p["name"] for p in item["patch"]["parameters"]] == ["dryRun", "fieldManager", "fieldValidation",
                                                                "force"]
    assert "/apis/openapi.example.com/v1/namespaces/{namespace}/widgets/{name}/status" in doc["paths"]
    assert WIDGET.schema is not None
    assert "anyOf" not in WIDGET.schema["properties"]["spec"]["properties"]["port"]  # the CRD's is unchanged


def test_v2_conversion():
    v3 = {"components": {"schemas": {
        "a.v1.Thing": {"type": "object", "properties": {
            "meta": {"allOf": [{"$ref": "#/components/schemas/a.v1.Meta"}], "default": {},
                     "description": "m"},
            "n": {"oneOf": [{"type": "integer"}, {"type": "string"}], "format": "int-or-string"},
            "opt": {"type": "string", "nullable": True}}},
        "a.v1.Meta": {"type": "object"}}},
        "paths": {"/apis/a/v1/things/{name}": {
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
            "put": {"operationId": "replace",
                    "parameters": [{"name": "dryRun", "in": "query",
                                    "schema": {"type": "string", "uniqueItems": True}}],
                    "requestBody": {"content": {"*/*": {"schema": {
                        "$ref": "#/components/schemas/a.v1.Thing"}}}, "required": True},
                    "responses": {"200": {"description": "OK", "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/a.v1.Thing"}}}}},
                    "x-kubernetes-action": "put"}}}}
    v2 = openapi_v2.to_v2({"apis/a/v1": v3})
    thing = v2["definitions"]["a.v1.Thing"]["properties"]
    assert thing["meta"] == {"$ref": "#/definitions/a.v1.Meta", "description": "m"}
    assert thing["n"] == {"type": "string", "format": "int-or-string"}
    assert thing["opt"] == {"type": "string"}
    put = v2["paths"]["/apis/a/v1/things/{name}"]["put"]
    assert put["parameters"][0] == {"name": "body", "in": "body", "required": True,
                                    "schema": {"$ref": "#/definitions/a.v1.Thing"}}
    assert put["parameters"][1] == {"name": "dryRun", "in": "query", "type": "string", "uniqueItems": True}
    assert put["responses"]["200"]["schema"] == {"$ref": "#/definitions/a.v1.Thing"}
    assert put["x-kubernetes-action"] == "put" and put["consumes"] == ["*/*"]
    assert v2["paths"]["/apis/a/v1/things/{name}"]["parameters"][0]["type"] == "string"


def _message(b: bytes) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for num, _, v in fields(b):
        out.setdefault(num, []).append(v)
    return out


def test_protobuf_document_carries_definitions_and_patch_parameters():
    doc = {"swagger": "2.0", "info": {"title": "Kubernetes", "version": "unversioned"},
           "definitions": {"a.v1.Thing": {
               "description": "A thing.", "type": "object", "required": ["spec"],
               "properties": {"spec": {"$ref": "#/definitions/a.v1.Spec"},
                              "n": {"type": "integer", "format": "int32", "minimum": 1}},
               "x-kubernetes-group-version-kind": [{"group": "a", "kind": "Thing", "version": "v1"}]}},
           "paths": {"/apis/a/v1/things/{name}": {"patch": {
               "operationId": "patchThing",
               "parameters": [{"name": "body", "in": "body", "schema": {}},
                              {"name": "fieldValidation", "in": "query", "type": "string"}],
               "x-kubernetes-group-version-kind": {"group": "a", "kind": "Thing", "version": "v1"}}}}}
    top = _message(openapi_proto.encode_document(doc))
    assert top[1] == [b"2.0"]
    assert _message(top[2][0]) == {1: [b"Kubernetes"], 2: [b"unversioned"]}
    named = _message(_message(top[9][0])[1][0])
    assert named[1] == [b"a.v1.Thing"]
    schema = _message(named[2][0])
    assert schema[4] == [b"A thing."] and schema[19] == [b"spec"]
    assert _message(schema[22][0]) == {1: [b"object"]}
    props = [_message(p) for p in _message(schema[25][0])[1]]
    assert [p[1][0] for p in props] == [b"spec", b"n"]
    assert _message(props[0][2][0])[1] == [b"#/definitions/a.v1.Spec"]
    ext = _message(schema[31][0])
    assert ext[1] == [b"x-kubernetes-group-version-kind"]
    assert json.loads(_message(ext[2][0])[2][0]) == [{"group": "a", "kind": "Thing", "version": "v1"}]
    path = _message(_message(top[8][0])[2][0])
    assert path[1] == [b"/apis/a/v1/things/{name}"]
    patch = _message(_message(path[2][0])[8][0])
    assert len(patch[8]) == 1  # query parameters only
    query = _message(_message(_message(_message(patch[8][0])[1][0])[2][0])[3][0])
    assert query[4] == [b"fieldValidation"] and query[2] == [b"query"]


@pytest.mark.parametrize("accept, expected", [
    ("", "application/json"),
    ("*/*", "application/json"),
    ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf", openapi_http.PB_V2_OLD),
    ("application/json;q=0.5, application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
     openapi_http.PB_V2),
    ("text/html", None),
    ("application/json;q=0", None),
])
def test_accept_negotiation(accept, expected):
    offers = {openapi_http.JSON: openapi_http.JSON, openapi_http.PB_V2_OLD: openapi_http.PB_V2,
              openapi_http.PB_V2: openapi_http.PB_V2}
    assert openapi_http.accepted(accept, offers) == expected


def test_texts_in_go_and_structured_merge_diff_form():
    assert field_validation.go_value({"spec": {"b": [1, "x"], "a": None, "c": True}}) == \
        "map[spec:map[a:<nil> b:[1 x] c:true]]"
    assert field_validation.smd_errors(["spec.a"]) == ".spec.a: field not declared in schema"
    assert field_validation.smd_errors(["spec.a", "b"]) == \
        "errors:\n  .spec.a: field not declared in schema\n  .b: field not declared in schema"
    assert field_validation.warning_header('unknown field "spec.x"') == '299 - "unknown field \\"spec.x\\""'


def _decode(group: str, resource: str, obj: dict[str, Any]) -> list[str]:
    found = openapi.OpenAPI().schema_for(builtin(group, "v1", resource))
    assert found is not None
    schemas, name = found
    return schemas.unknown_fields(obj, name)


def test_builtin_unknown_fields_as_the_strict_decoder_names_them():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}, "bogus": 1},
           "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}},
                                    "Image": "case matters"}],
                    "affinity": {"nodeAffinity": {"x": 1}}},
           "status": {"phase": "Pending"}}
    assert _decode("", "pods", pod) == ["metadata.bogus", "spec.containers[0].Image",
                                        "spec.affinity.nodeAffinity.x"]
    cm = {"data": {"a": "b"}, "binaryData": {"x": "eA=="}, "immutable": True}
    assert _decode("", "configmaps", cm) == []


@pytest.mark.parametrize("group, resource, obj, message", [
    ("apps", "deployments", {"spec": {"replicas": "3"}},
     "json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"),
    ("apps", "deployments", {"spec": {"replicas": 1.5}},
     "json: cannot unmarshal number 1.5 into Go struct field DeploymentSpec.spec.replicas of type int32"),
    ("", "pods", {"spec": {"containers": {"name": "c"}}},
     "json: cannot unmarshal object into Go struct field PodSpec.spec.containers of type []v1.Container"),
    ("", "pods", {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": "80"}]}]}},
     "json: cannot unmarshal string into Go struct field ContainerPort.spec.containers.ports.containerPort "
     "of type int32"),
    ("", "pods", {"spec": {"nodeSelector": {"a": 1}}},
     "json: cannot unmarshal number into Go struct field PodSpec.spec.nodeSelector of type string"),
    ("", "pods", {"metadata": {"labels": ["a"]}},
     "json: cannot unmarshal array into Go struct field ObjectMeta.metadata.labels of type "
     "map[string]string"),
    ("", "pods", {"spec": {"hostNetwork": "true"}},
     "json: cannot unmarshal string into Go struct field PodSpec.spec.hostNetwork of type bool"),
])
def test_builtin_wrong_json_types_worded_as_go(group, resource, obj, message):
    with pytest.raises(DecodeError) as e:
        _decode(group, resource, obj)
    assert str(e.value) == message


def test_named_scalars_decode_themselves():
    """Quantity, Time and IntOrString take a string or a number, as their own unmarshallers do."""
    pod = {"metadata": {"creationTimestamp": None},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": 1, "memory": "1Gi"}},
                                    "livenessProbe": {"httpGet": {"port": "http"}},
                                    "readinessProbe": {"httpGet": {"port": 8080}}}]}}
    assert _decode("", "pods", pod) == []

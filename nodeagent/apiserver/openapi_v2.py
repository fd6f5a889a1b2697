"""OpenAPI v3 documents as one Swagger 2.0 document, the form kube-apiserver serves at /openapi/v2.

Schemas keep their names (`#/components/schemas/X` becomes `#/definitions/X`); kube-openapi's one-element
`allOf` around a `$ref` becomes the `$ref` with its description; what Swagger 2.0 cannot say (`oneOf`,
`anyOf`, `nullable`, CEL rules) is left out, a `oneOf` of scalars (IntOrString, Quantity) becomes a string;
request bodies become `in: body` parameters and response contents a `schema`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.api.schema import REF_PREFIX

_V2_PREFIX = "#/definitions/"
_OPS = ("get", "put", "post", "delete", "patch")


def to_v2(docs: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The v3 documents merged into one Swagger 2.0 document, as kube-apiserver serves at /openapi/v2."""
    definitions: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for gv in sorted(docs):
        doc = docs[gv]
        for name, s in doc.get("components", {}).get("schemas", {}).items():
            definitions[name] = schema_to_v2(s)
        for p, item in doc.get("paths", {}).items():
            paths[p] = _path_to_v2(item)
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": "unversioned"},
            "paths": paths, "definitions": definitions,
            "securityDefinitions": {"BearerToken": {"description": "Bearer Token authentication",
                                                    "in": "header", "name": "authorization",
                                                    "type": "apiKey"}},
            "security": [{"BearerToken": []}]}


def schema_to_v2(s: Any) -> Any:
    if isinstance(s, list):
        return [schema_to_v2(x) for x in s]
    if not isinstance(s, dict):
        return s
    out: dict[str, Any] = {}
    all_of = s.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0] and "properties" not in s:
        out["$ref"] = _v2_ref(all_of[0]["$ref"])
        if "description" in s:
            out["description"] = s["description"]
        return out
    for k, v in s.items():
        if k in ("nullable", "oneOf", "anyOf", "x-kubernetes-validations"):
            continue
        if k == "$ref":
            out[k] = _v2_ref(v)
        elif k in ("properties", "patternProperties"):
            out[k] = {n: schema_to_v2(x) for n, x in v.items()}
        elif k in ("items", "additionalProperties", "not"):
            out[k] = schema_to_v2(v)
        elif k == "allOf":
            out[k] = [schema_to_v2(x) for x in v]
        else:
            out[k] = v
    if ("oneOf" in s or "anyOf" in s) and "type" not in out and "$ref" not in out:
        out["type"] = "string"  # IntOrString, Quantity: Swagger 2.0 has no oneOf; kube-openapi says string
    return out


def _v2_ref(ref: str) -> str:
    return _V2_PREFIX + ref[len(REF_PREFIX):] if ref.startswith(REF_PREFIX) else ref


def _param_to_v2(p: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in p:
        return {"$ref": p["$ref"].replace("#/components/parameters/", "#/parameters/")}
    out = {k: v for k, v in p.items() if k != "schema"}
    schema = p.get("schema") or {}
    for k in ("type", "uniqueItems", "format"):
        if k in schema:
            out[k] = schema[k]
    return out


def _path_to_v2(item: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in item.items():
        if k == "parameters":
            out[k] = [_param_to_v2(p) for p in v]
        elif k in _OPS:
            out[k] = _operation_to_v2(v)
        elif k.startswith("x-"):
            out[k] = v
    return out


def _operation_to_v2(op: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: v for k, v in op.items()
                           if k in ("description", "operationId", "tags", "deprecated") or k.startswith("x-")}
    params = [_param_to_v2(p) for p in op.get("parameters", [])]
    body = op.get("requestBody")
    if isinstance(body, dict):
        content: dict[str, Any] = body.get("content") or {}
        out["consumes"] = sorted(content)
        first: dict[str, Any] = next(iter(content.values()), {})
        schema = first.get("schema", {})
        params.insert(0, {"name": "body", "in": "body", "required": bool(body.get("required")),
                          "schema": schema_to_v2(schema)})
    if params:
        out["parameters"] = params
    responses: dict[str, Any] = {}
    produces: set[str] = set()
    for code, r in (op.get("responses") or {}).items():
        v2r: dict[str, Any] = {"description": r.get("description", "")}
        content = r.get("content") or {}
        produces.update(content)
        if content:
            v2r["schema"] = schema_to_v2(next(iter(content.values())).get("schema", {}))
        responses[code] = v2r
    out["responses"] = responses
    if produces:
        out["produces"] = sorted(produces)
    out["schemes"] = ["https"]
    return out

"""The Swagger 2.0 document as gnostic's `openapi.v2.Document` protobuf, as client-go asks /openapi/v2.

Field numbers from gnostic-models' openapiv2/OpenAPIv2.proto. What is encoded is what clients read from it:
`swagger`, `info`, every definition (kubectl explain, client-side validation and strategic-merge patch keys
read them through kube-openapi's proto parser), and each path's operations with their vendor extensions and
query parameters (kubectl's query-parameter verifier looks for `dryRun`/`fieldValidation` on the PATCH
operation of a kind). Vendor extensions, defaults and enum values travel as `Any.yaml` text; JSON is YAML.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

_OPERATIONS = {"get": 2, "put": 3, "post": 4, "delete": 5, "options": 6, "head": 7, "patch": 8}


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _str(num: int, s: str) -> bytes:
    return _len(num, s.encode()) if s else b""


def _bool(num: int, v: Any) -> bytes:
    return _varint(num << 3) + b"\x01" if v else b""


def _int(num: int, v: Any) -> bytes:
    return _varint(num << 3) + _varint(int(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) \
        else b""


def _double(num: int, v: Any) -> bytes:
    return _varint(num << 3 | 1) + struct.pack("<d", float(v)) if isinstance(v, (int, float)) else b""


def _any(value: Any) -> bytes:
    """gnostic's Any: the value as YAML text (field 2)."""
    return _str(2, json.dumps(value, separators=(",", ":")) if not isinstance(value, str)
                else json.dumps(value))


def _extensions(num: int, obj: Mapping[str, Any]) -> bytes:
    return b"".join(_len(num, _str(1, k) + _len(2, _any(v))) for k, v in obj.items() if k.startswith("x-"))


def schema(s: Mapping[str, Any]) -> bytes:
    out = [_str(1, s.get("$ref", "")), _str(2, s.get("format", "")), _str(3, s.get("title", "")),
           _str(4, s.get("description", ""))]
    if "default" in s:
        out.append(_len(5, _any(s["default"])))
    out += [_double(6, s.get("multipleOf")), _double(7, s.get("maximum")),
            _bool(8, s.get("exclusiveMaximum")), _double(9, s.get("minimum")),
            _bool(10, s.get("exclusiveMinimum")), _int(11, s.get("maxLength")),
            _int(12, s.get("minLength")), _str(13, s.get("pattern", "")), _int(14, s.get("maxItems")),
            _int(15, s.get("minItems")), _bool(16, s.get("uniqueItems")), _int(17, s.get("maxProperties")),
            _int(18, s.get("minProperties"))]
    out += [_str(19, r) for r in s.get("required") or ()]
    out += [_len(20, _any(e)) for e in s.get("enum") or ()]
    extra = s.get("additionalProperties")
    if isinstance(extra, dict):
        out.append(_len(21, _len(1, schema(extra))))
    elif isinstance(extra, bool):
        out.append(_len(21, _varint(2 << 3) + (b"\x01" if extra else b"\x00")))
    t = s.get("type")
    if t:
        out.append(_len(22, b"".join(_str(1, x) for x in ([t] if isinstance(t, str) else t))))
    items = s.get("items")
    if isinstance(items, dict):
        out.append(_len(23, _len(1, schema(items))))
    out += [_len(24, schema(x)) for x in s.get("allOf") or ()]
    props = s.get("properties")
    if isinstance(props, dict):
        out.append(_len(25, b"".join(_len(1, _str(1, k) + _len(2, schema(v))) for k, v in props.items())))
    out.append(_bool(27, s.get("readOnly")))
    out.append(_extensions(31, s))
    return b"".join(out)


def _query_parameter(p: Mapping[str, Any]) -> bytes:
    sub = b"".join([_bool(1, p.get("required")), _str(2, p.get("in", "")),
                    _str(3, p.get("description", "")), _str(4, p.get("name", "")), _str(6, p.get("type", "")),
                    _bool(20, p.get("uniqueItems"))])
    # ParametersItem.parameter.non_body_parameter.query_parameter_sub_schema
    return _len(1, _len(2, _len(3, sub)))


def _operation(op: Mapping[str, Any]) -> bytes:
    out = [_str(1, t) for t in op.get("tags") or ()]
    out += [_str(3, op.get("description", "")), _str(5, op.get("operationId", ""))]
    out += [_str(6, t) for t in op.get("produces") or ()]
    out += [_str(7, t) for t in op.get("consumes") or ()]
    out += [_len(8, _query_parameter(p)) for p in op.get("parameters") or () if p.get("in") == "query"]
    out += [_str(10, s) for s in op.get("schemes") or ()]
    out.append(_extensions(13, op))
    return b"".join(out)


def _path_item(item: Mapping[str, Any]) -> bytes:
    out = [_len(num, _operation(item[name])) for name, num in _OPERATIONS.items() if name in item]
    out.append(_extensions(10, item))
    return b"".join(out)


def encode_document(doc: Mapping[str, Any]) -> bytes:
    info = doc.get("info") or {}
    out = [_str(1, doc.get("swagger", "2.0")),
           _len(2, _str(1, info.get("title", "")) + _str(2, info.get("version", "")))]
    paths = doc.get("paths") or {}
    out.append(_len(8, b"".join(_len(2, _str(1, p) + _len(2, _path_item(v))) for p, v in paths.items())))
    defs = doc.get("definitions") or {}
    out.append(_len(9, b"".join(_len(1, _str(1, k) + _len(2, schema(v))) for k, v in defs.items())))
    return b"".join(out)

"""A CustomResourceDefinition's structural schema applied to a custom object: prune, default, validate.

As apiextensions-apiserver does on create and update: fields the schema does not specify are pruned (and
reported, for `fieldValidation`), `default`s fill absent (and non-nullable null) fields, then the object is
validated; every failure is a field error worded as kube-apiserver words it (kube-openapi's validator messages
wrapped by `kubeOpenAPIResultToFieldErrors`), with the JSON path as its field.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from nodeagent.api import schema_cel
from nodeagent.api.validation import FieldErrors, err

Schema = Mapping[str, Any]
_ROOT_KEPT = ("apiVersion", "kind", "metadata")
_pattern_cache: dict[str, re.Pattern[str] | None] = {}


def admit(obj: dict[str, Any], schema: Schema, old: dict[str, Any] | None = None) -> FieldErrors:
    """What apiextensions-apiserver does to a custom object on create and update (`old`), in its order; the
    validation rules (CEL) run on an object that passed the schema."""
    prune(obj, schema)
    apply_defaults(obj, schema)
    return validate(obj, schema) or schema_cel.validate(obj, schema, old)


# ------------------------------------------------------------------ pruning
def prune(obj: dict[str, Any], schema: Schema) -> list[str]:
    """Remove the fields `schema` does not specify; returns their paths (`spec.foo`, `spec.items[0].bar`)."""
    out: list[str] = []
    _prune(obj, schema, "", True, out)
    return out


def _prune(obj: Any, s: Schema, path: str, root: bool, out: list[str]) -> None:
    if isinstance(obj, dict):
        preserve = bool(s.get("x-kubernetes-preserve-unknown-fields"))
        embedded = bool(s.get("x-kubernetes-embedded-resource"))
        props = s.get("properties") or {}
        extra = s.get("additionalProperties")
        for k in list(obj):
            where = f"{path}.{k}" if path else k
            if (root or embedded) and k in _ROOT_KEPT:
                # ObjectMeta is every object's, whatever the schema says of it (`metadata: {type:
                # object}` in most CRDs, the Gateway API's among them): never pruned by the schema
                continue
            if k in props:
                _prune(obj[k], props[k], where, False, out)
            elif isinstance(extra, dict):
                _prune(obj[k], extra, where, False, out)
            elif not preserve and extra is not True:
                del obj[k]
                out.append(where)
    elif isinstance(obj, list) and isinstance(s.get("items"), dict):
        for i, v in enumerate(obj):
            _prune(v, s["items"], f"{path}[{i}]", False, out)


# ------------------------------------------------------------------ defaulting
def apply_defaults(obj: Any, schema: Schema) -> None:
    """Fill absent fields from `default` (deep-copied), and replace nulls where the field is not nullable."""
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        for k, sub in props.items():
            if k in obj and obj[k] is None and not sub.get("nullable"):
                del obj[k]  # a null for a non-nullable field is pruned, then defaulted if it has a default
            if k not in obj and "default" in sub:
                obj[k] = copy.deepcopy(sub["default"])
        for k, v in obj.items():
            sub = props.get(k)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None and v is not None:
                apply_defaults(v, sub)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for v in obj:
            if v is not None:
                apply_defaults(v, schema["items"])


# ------------------------------------------------------------------ validation
def validate(obj: Any, schema: Schema) -> FieldErrors:
    out: FieldErrors = []
    _validate(obj, schema, "", out)
    return out


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _value(v: Any) -> str:
    """A bad value as field.Error prints it: strings quoted, numbers and booleans plain."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return str(v)
    return json.dumps(v, separators=(",", ":"))


def _num(v: float) -> str:
    """A float64 bound as Go's %v prints it."""
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _invalid(out: FieldErrors, path: str, value: Any, detail: str, reason: str = "FieldValueInvalid") -> None:
    out.append(err(reason, path, f"Invalid value: {_value(value)}: {detail}"))


def _type_ok(v: Any, s: Schema) -> bool:
    t = s.get("type")
    if s.get("x-kubernetes-int-or-string"):
        return isinstance(v, (int, str)) and not isinstance(v, bool)
    if not t:
        return True
    actual = _json_type(v)
    return actual == t or (t == "number" and actual == "integer")


def _type_name(s: Schema) -> str:
    return "integer,string" if s.get("x-kubernetes-int-or-string") else str(s.get("type", ""))


def _validate(v: Any, s: Schema, path: str, out: FieldErrors) -> None:
    name = path or "."
    if v is None:
        if s.get("nullable") or not (s.get("type") or s.get("x-kubernetes-int-or-string")):
            return
        _invalid(out, path, "null", f'{name} in body must be of type {_type_name(s)}: "null"',
                 "FieldValueTypeInvalid")
        return
    if not _type_ok(v, s):
        actual = _json_type(v)
        _invalid(out, path, actual, f'{name} in body must be of type {_type_name(s)}: "{actual}"',
                 "FieldValueTypeInvalid")
        return
    enum = s.get("enum")
    if isinstance(enum, list) and v not in enum:
        supported = ", ".join(json.dumps(e) if isinstance(e, str) else json.dumps(e, separators=(",", ":"))
                              for e in enum)
        out.append(err("FieldValueNotSupported", path,
                       f"Unsupported value: {_value(v)}: supported values: {supported}"))
    if isinstance(v, str):
        _validate_string(v, s, path, name, out)
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        _validate_number(v, s, path, name, out)
    elif isinstance(v, list):
        _validate_array(v, s, path, name, out)
    elif isinstance(v, dict):
        _validate_object(v, s, path, name, out)


def _validate_string(v: str, s: Schema, path: str, name: str, out: FieldErrors) -> None:
    n = len(v)
    if "maxLength" in s and n > s["maxLength"]:
        out.append(err("FieldValueTooLong", path, f"Too long: may not be more than {s['maxLength']} bytes"))
    if "minLength" in s and n < s["minLength"]:
        _invalid(out, path, v, f"{name} in body should be at least {s['minLength']} chars long")
    pat = s.get("pattern")
    if isinstance(pat, str):
        rx = _pattern(pat)
        if rx is not None and not rx.search(v):
            _invalid(out, path, v, f"{name} in body should match '{pat}'")


def _pattern(p: str) -> re.Pattern[str] | None:
    if p not in _pattern_cache:
        try:
            _pattern_cache[p] = re.compile(p)
        except re.error:
            _pattern_cache[p] = None  # refused when the CRD was written; nothing to hold an object to
    return _pattern_cache[p]


def _validate_number(v: float, s: Schema, path: str, name: str, out: FieldErrors) -> None:
    if "maximum" in s:
        mx = s["maximum"]
        if s.get("exclusiveMaximum") and v >= mx:
            _invalid(out, path, v, f"{name} in body should be less than {_num(mx)}")
        elif v > mx:
            _invalid(out, path, v, f"{name} in body should be less than or equal to {_num(mx)}")
    if "minimum" in s:
        mn = s["minimum"]
        if s.get("exclusiveMinimum") and v <= mn:
            _invalid(out, path, v, f"{name} in body should be greater than {_num(mn)}")
        elif v < mn:
            _invalid(out, path, v, f"{name} in body should be greater than or equal to {_num(mn)}")
    mult = s.get("multipleOf")
    if isinstance(mult, (int, float)) and mult and not math.isclose(v / mult, round(v / mult)):
        _invalid(out, path, v, f"{name} in body should be a multiple of {_num(mult)}")


def _validate_array(v: list[Any], s: Schema, path: str, name: str, out: FieldErrors) -> None:
    if "maxItems" in s and len(v) > s["maxItems"]:
        out.append(err("FieldValueTooMany", path,
                       f"Too many: {len(v)}: must have at most {s['maxItems']} items"))
    if "minItems" in s and len(v) < s["minItems"]:
        _invalid(out, path, len(v), f"{name} in body should have at least {s['minItems']} items")
    if s.get("uniqueItems") or s.get("x-kubernetes-list-type") == "set":
        seen: list[Any] = []
        for i, item in enumerate(v):
            if item in seen:
                out.append(err("FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: {_value(item)}"))
            else:
                seen.append(item)
    if s.get("x-kubernetes-list-type") == "map":
        keys = s.get("x-kubernetes-list-map-keys") or []
        seen_keys: list[tuple[Any, ...]] = []
        for i, item in enumerate(v):
            if isinstance(item, dict):
                k = tuple(item.get(key) for key in keys)
                if k in seen_keys:
                    shown = ", ".join(f'"{key}":{_value(item.get(key))}' for key in keys)
                    out.append(err("FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: map[{shown}]"))
                seen_keys.append(k)
    items = s.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(v):
            _validate(item, items, f"{path}[{i}]", out)


def _validate_object(v: dict[str, Any], s: Schema, path: str, name: str, out: FieldErrors) -> None:
    for k in s.get("required") or ():
        if k not in v:
            out.append(err("FieldValueRequired", f"{path}.{k}" if path else k, "Required value"))
    if "maxProperties" in s and len(v) > s["maxProperties"]:
        out.append(err("FieldValueTooMany", path,
                       f"Too many: {len(v)}: must have at most {s['maxProperties']} items"))
    if "minProperties" in s and len(v) < s["minProperties"]:
        _invalid(out, path, len(v), f"{name} in body should have at least {s['minProperties']} properties")
    if s.get("x-kubernetes-embedded-resource"):
        for k in ("apiVersion", "kind"):
            if not v.get(k):
                out.append(err("FieldValueRequired", f"{path}.{k}", "Required value: must not be empty"))
    props = s.get("properties") or {}
    extra = s.get("additionalProperties")
    for k, item in v.items():
        where = f"{path}.{k}" if path else k
        if not path and k == "metadata":
            continue  # ObjectMeta: validated as every object's
        sub = props.get(k)
        if sub is None and isinstance(extra, dict):
            sub = extra
        if sub is not None:
            _validate(item, sub, where, out)


# ------------------------------------------------------------------ the CRD's own schema
def crd_schema_errors(crd: dict[str, Any]) -> FieldErrors:
    """A CRD's schemas checked as apiextensions-apiserver checks them: structural, with valid patterns and
    defaults that pass their own schema; paths as in `spec.versions[0].schema.openAPIV3Schema.type`."""
    out: FieldErrors = []
    for i, v in enumerate((crd.get("spec") or {}).get("versions") or []):
        if not isinstance(v, dict):
            continue
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            continue
        path = f"spec.versions[{i}].schema.openAPIV3Schema"
        if not schema.get("type"):
            out.append(err("FieldValueRequired", f"{path}.type",
                           "Required value: must not be empty at the root"))
        elif schema.get("type") not in (None, "object"):
            out.append(err("FieldValueInvalid", f"{path}.type",
                           f'Invalid value: "{schema.get("type")}": must be object at the root'))
        _structural(schema, path, out)
    return out


def _structural(s: Schema, path: str, out: FieldErrors) -> None:
    out.extend(schema_cel.rule_errors(s, path))
    props = s.get("properties")
    if isinstance(props, dict) and isinstance(s.get("additionalProperties"), dict):
        out.append(err("FieldValueForbidden", f"{path}.additionalProperties",
                       "Forbidden: additionalProperties and properties are mutual exclusive"))
    if s.get("type") == "array" and not isinstance(s.get("items"), dict):
        out.append(err("FieldValueRequired", f"{path}.items", "Required value: must be specified"))
    pat = s.get("pattern")
    if isinstance(pat, str) and _pattern(pat) is None:
        out.append(err("FieldValueInvalid", f"{path}.pattern",
                       f"Invalid value: {_value(pat)}: must be a valid regular expression"))
    if "default" in s and s["default"] is not None:
        d = copy.deepcopy(s["default"])
        if isinstance(d, dict):
            prune(d, {**s, "x-kubernetes-embedded-resource": False})
        for e in validate(d, s):
            field = f"{path}.default" + (f".{e['field']}" if e["field"] else "")
            out.append({**e, "field": field})
    for name, child in (props or {}).items() if isinstance(props, dict) else ():
        if not isinstance(child, dict):
            continue
        where = f"{path}.properties[{name}]"
        if not child.get("type") and not child.get("x-kubernetes-int-or-string") \
                and not child.get("x-kubernetes-preserve-unknown-fields"):
            out.append(err("FieldValueRequired", f"{where}.type",
                           "Required value: must not be empty for specified object fields"))
        _structural(child, where, out)
    for key in ("items", "additionalProperties"):
        child = s.get(key)
        if isinstance(child, dict):
            where = f"{path}.{key}"
            if not child.get("type") and not child.get("x-kubernetes-int-or-string") \
                    and not child.get("x-kubernetes-preserve-unknown-fields"):
                what = "array items" if key == "items" else "object fields"
                out.append(err("FieldValueRequired", f"{where}.type",
                               f"Required value: must not be empty for specified {what}"))
            _structural(child, where, out)

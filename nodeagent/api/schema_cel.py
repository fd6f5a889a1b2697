"""CRD validation rules (`x-kubernetes-validations`): CEL expressions over `self` (and `oldSelf` on update).

As apiextensions-apiserver evaluates them: each rule at the schema node that declares it, with `self` bound
to the value there; a rule that mentions `oldSelf` is a transition rule, evaluated only on update where the
old object has a value at the same place (properties by name, map values by key, `list-type: map` items
by their keys). A false rule is a field error at the node's path (plus the rule's `fieldPath`) with the rule's
`message`, its `messageExpression`'s result, or `failed rule: <rule>`, and the rule's `reason`. CEL itself is
cel-python's (the CEL spec's standard functions, `matches` with Python's regular expressions).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import celpy

from nodeagent.api.validation import FieldErrors, err

Schema = Mapping[str, Any]
_ENV = celpy.Environment()
_ABSENT = object()


class RuleError(ValueError):
    """A rule that does not compile."""


@functools.lru_cache(maxsize=1024)
def compile_rule(rule: str) -> celpy.Runner:
    try:
        return _ENV.program(_ENV.compile(rule))
    except Exception as e:  # celpy raises its parser's errors (lark, CELParseError) as they come
        raise RuleError(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__) from None


def rule_errors(schema: Schema, path: str) -> FieldErrors:
    """The rules of a CRD schema that do not compile, at their place in the CRD."""
    out: FieldErrors = []
    for i, r in enumerate(schema.get("x-kubernetes-validations") or ()):
        if not isinstance(r, dict) or not isinstance(r.get("rule"), str):
            out.append(err("FieldValueRequired", f"{path}.x-kubernetes-validations[{i}].rule",
                           "Required value"))
            continue
        for key in ("rule", "messageExpression"):
            if isinstance(r.get(key), str):
                try:
                    compile_rule(r[key])
                except RuleError as e:
                    out.append(err("FieldValueInvalid", f"{path}.x-kubernetes-validations[{i}].{key}",
                                   f'Invalid value: "{r[key]}": compilation failed: {e}'))
    return out


def validate(obj: Any, schema: Schema, old: Any = _ABSENT) -> FieldErrors:
    """Every rule of `schema` (and its descendants) against `obj`; `old`: the object being updated."""
    out: FieldErrors = []
    _walk(obj, _ABSENT if old is None else old, schema, "", out)
    return out


def _walk(v: Any, old: Any, s: Schema, path: str, out: FieldErrors) -> None:
    if v is None:
        return
    for rule in s.get("x-kubernetes-validations") or ():
        _check(rule, v, old, s, path, out)
    if isinstance(v, dict):
        props = s.get("properties") or {}
        extra = s.get("additionalProperties")
        for k, item in v.items():
            before = old.get(k, _ABSENT) if isinstance(old, dict) else _ABSENT
            if k in props:
                _walk(item, before, props[k], f"{path}.{k}" if path else k, out)
            elif isinstance(extra, dict):
                _walk(item, before, extra, f"{path}[{k}]", out)
    elif isinstance(v, list) and isinstance(s.get("items"), dict):
        keys = s.get("x-kubernetes-list-map-keys") if s.get("x-kubernetes-list-type") == "map" else None
        olds: dict[tuple[Any, ...], Any] = {}
        if keys and isinstance(old, list):
            olds = {tuple(o.get(k) for k in keys): o for o in old if isinstance(o, dict)}
        for i, item in enumerate(v):
            before = olds.get(tuple(item.get(k) for k in keys), _ABSENT) \
                if keys and isinstance(item, dict) else _ABSENT
            _walk(item, before, s["items"], f"{path}[{i}]", out)


def _check(rule: Mapping[str, Any], v: Any, old: Any, s: Schema, path: str, out: FieldErrors) -> None:
    text = rule.get("rule")
    if not isinstance(text, str):
        return
    transition = "oldSelf" in text
    if transition and old is _ABSENT:
        return  # a transition rule says nothing about a create, or a value that was not there
    bindings = {"self": celpy.json_to_cel(escaped(v, s))}
    if transition:
        bindings["oldSelf"] = celpy.json_to_cel(escaped(old, s))
    where = path + str(rule.get("fieldPath") or "")
    where = where.lstrip(".")
    result: Any
    try:
        result = compile_rule(text).evaluate(bindings)
    except RuleError:
        return  # refused when the CRD was written
    except Exception as e:
        result = e
    if isinstance(result, Exception):
        out.append(err("FieldValueInvalid", where,
                       f'Invalid value: "{_type(s, v)}": {_eval_message(result)}'))
        return
    if bool(result):
        return
    message = rule.get("message") or f"failed rule: {text}"
    if isinstance(rule.get("messageExpression"), str):
        try:
            m = compile_rule(rule["messageExpression"]).evaluate(bindings)
            if isinstance(m, str) and m.strip():
                message = str(m)
        except Exception:
            pass  # kube-apiserver falls back to the static message too
    reason = rule.get("reason") or "FieldValueInvalid"
    if reason == "FieldValueForbidden":
        out.append(err(reason, where, f"Forbidden: {message}"))
    elif reason == "FieldValueRequired":
        out.append(err(reason, where, f"Required value: {message}"))
    elif reason == "FieldValueDuplicate":
        out.append(err(reason, where, f'Duplicate value: "{_type(s, v)}": {message}'))
    else:
        out.append(err("FieldValueInvalid", where, f'Invalid value: "{_type(s, v)}": {message}'))


# CEL's reserved words: a property of that name is `__<word>__` in a rule (apiserver/pkg/cel/escaping.go)
RESERVED = frozenset({"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for",
                      "function", "if", "import", "let", "loop", "package", "namespace", "return", "var",
                      "void", "while"})


def escape_property(name: str) -> str:
    """A property's name as rules spell it: reserved words as `__word__`; `__`, `.`, `-`, `/` escaped."""
    if name in RESERVED:
        return f"__{name}__"
    return (name.replace("__", "__underscores__").replace(".", "__dot__").replace("-", "__dash__")
            .replace("/", "__slash__"))


def escaped(v: Any, s: Schema) -> Any:
    """The value with its object properties (those the schema declares) named as rules see them; map keys
    (additionalProperties) and unknown fields keep theirs."""
    if isinstance(v, dict):
        props = s.get("properties") or {}
        extra = s.get("additionalProperties")
        out = {}
        for k, item in v.items():
            if k in props:
                out[escape_property(k)] = escaped(item, props[k])
            else:
                out[k] = escaped(item, extra) if isinstance(extra, dict) else item
        return out
    if isinstance(v, list) and isinstance(s.get("items"), dict):
        return [escaped(item, s["items"]) for item in v]
    return v


def _type(s: Schema, v: Any) -> str:
    t = s.get("type")
    if isinstance(t, str) and t:
        return t
    return "object" if isinstance(v, dict) else "string" if isinstance(v, str) else "integer"


def _eval_message(e: Exception) -> str:
    args = getattr(e, "args", ())
    text = args[0] if args and isinstance(args[0], str) else str(e)
    if text.startswith("no such member in mapping: "):
        return "no such key: " + text.removeprefix("no such member in mapping: ").strip("'")
    return text

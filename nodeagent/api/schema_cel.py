"""CRD validation rules (`x-kubernetes-validations`): CEL expressions over `self` (and `oldSelf` on update).

As apiextensions-apiserver evaluates them: each rule at the schema node that declares it, with `self` bound
to the value there; a rule that mentions `oldSelf` is a transition rule, evaluated only on update where the
old object has a value at the same place (properties by name, map values by key, `list-type: map` items
by their keys). A false rule is a field error at the node's path (plus the rule's `fieldPath`) with the rule's
`message`, its `messageExpression`'s result, or `failed rule: <rule>`, and the rule's `reason`. CEL itself is
cel-python's (the CEL spec's standard functions, `matches` with Python's regular expressions).

cel-python (with lark's CEL grammar and parse tables, ~7 MiB) is imported when a rule is first compiled, not
with this module, and a CRD's rules are compiled twice, as apiextensions-apiserver does: once when the CRD is
written, to refuse one that does not compile, without keeping the programs; then when an object of the kind is
first validated, kept for the next ones. The CRDs the server ships (`apiserver.crds`) are installed under
`shipped_rules()`: their rules are known to compile (a unit test compiles every one), so a server's start
loads no CEL; one that did not compile would still be refused at evaluation with kube's `rule compile error`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from nodeagent.api.validation import FieldErrors, err

if TYPE_CHECKING:
    import celpy

Schema = Mapping[str, Any]
_ABSENT = object()
_SHIPPED: contextvars.ContextVar[bool] = contextvars.ContextVar("schema_cel_shipped", default=False)


class RuleError(ValueError):
    """A rule that does not compile."""


@functools.cache
def _env() -> celpy.Environment:
    import celpy

    return celpy.Environment()


def _compile(rule: str) -> celpy.Runner:
    env = _env()
    try:
        return env.program(env.compile(rule))
    except Exception as e:  # celpy raises its parser's errors (lark, CELParseError) as they come
        raise RuleError(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__) from None


@functools.lru_cache(maxsize=1024)
def compile_rule(rule: str) -> celpy.Runner:
    """The program of a rule about to be evaluated (kept: the next object of the kind reuses it)."""
    return _compile(rule)


def check_rule(rule: str) -> None:
    """RuleError when `rule` does not compile; the program is not kept (an object that uses it compiles it
    again through `compile_rule`)."""
    _compile(rule)


@contextlib.contextmanager
def shipped_rules() -> Iterator[None]:
    """Within it, `rule_errors` takes the rules as compiling (for the CRDs the server ships and installs at
    start, whose rules the test suite compiles) instead of loading CEL to compile them."""
    token = _SHIPPED.set(True)
    try:
        yield
    finally:
        _SHIPPED.reset(token)


def to_cel(value: Any) -> Any:
    """A JSON value as a CEL value (for evaluation: CEL is loaded by then)."""
    import celpy

    return celpy.json_to_cel(value)


def is_bool(value: Any) -> bool:
    import celpy

    return isinstance(value, (bool, celpy.celtypes.BoolType))


def cel_map(values: Mapping[str, Any]) -> Any:
    """A CEL map of string keys to CEL values."""
    import celpy

    return celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in values.items()})


def rule_errors(schema: Schema, path: str) -> FieldErrors:
    """The rules of a CRD schema that do not compile, at their place in the CRD."""
    out: FieldErrors = []
    for i, r in enumerate(schema.get("x-kubernetes-validations") or ()):
        if not isinstance(r, dict) or not isinstance(r.get("rule"), str):
            out.append(err("FieldValueRequired", f"{path}.x-kubernetes-validations[{i}].rule",
                           "Required value"))
            continue
        if _SHIPPED.get():
            continue
        for key in ("rule", "messageExpression"):
            if isinstance(r.get(key), str):
                try:
                    check_rule(r[key])
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
    try:
        program = compile_rule(text)
    except RuleError as e:  # refused when the CRD was written, unless CEL changed since (kube's words then)
        out.append(err("FieldValueInvalid", path.lstrip("."),
                       f'Invalid value: "{_type(s, v)}": rule compile error: {e}'))
        return
    bindings = {"self": to_cel(escaped(v, s))}
    if transition:
        bindings["oldSelf"] = to_cel(escaped(old, s))
    where = path + str(rule.get("fieldPath") or "")
    where = where.lstrip(".")
    result: Any
    try:
        result = program.evaluate(bindings)
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

"""Label selectors (string and LabelSelector forms), node selector terms, and field selectors.

One implementation for list filtering in the apiserver, controllers' selectors,
the scheduler's affinity, and Service → pod matching.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any


class SelectorError(ValueError):
    """An unparsable selector; the message is what a Status(BadRequest) carries."""


@dataclasses.dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt  (= / == are In with one value, != is NotIn)
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "In":
            return present and labels[self.key] in self.values
        if self.op == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.op == "Exists":
            return present
        if self.op == "DoesNotExist":
            return not present
        if self.op in ("Gt", "Lt"):
            if not present or len(self.values) != 1:
                return False
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if self.op == "Gt" else have < want
        raise SelectorError(f"unknown operator {self.op!r}")


@dataclasses.dataclass(frozen=True)
class Selector:
    """A conjunction of requirements; `Selector(())` matches everything, `NOTHING` matches nothing."""

    requirements: tuple[Requirement, ...] = ()
    empty_matches_nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.empty_matches_nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @property
    def is_everything(self) -> bool:
        return not self.requirements and not self.empty_matches_nothing


EVERYTHING = Selector()
NOTHING = Selector((), empty_matches_nothing=True)

_TOKEN = re.compile(r"\s*(!=|==|=|\(|\)|,|!|[^\s!=(),]+)")


def _tokens(s: str) -> list[str]:
    out, pos = [], 0
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if not m:
            if s[pos:].strip() == "":
                break
            raise SelectorError(f"unable to parse requirement: {s!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def parse_label_selector(s: str | None) -> Selector:
    """The string form used in `?labelSelector=`: `a=b,c!=d,e in (x,y),f notin (z),g,!h`."""
    if s is None or not s.strip():
        return EVERYTHING
    toks = _tokens(s)
    reqs: list[Requirement] = []
    i = 0

    def need(cond: bool, what: str) -> None:
        if not cond:
            raise SelectorError(f"unable to parse requirement: {what} in {s!r}")

    while i < len(toks):
        if toks[i] == "!":
            need(i + 1 < len(toks), "missing key after '!'")
            reqs.append(Requirement(_key(toks[i + 1]), "DoesNotExist"))
            i += 2
        else:
            key = _key(toks[i])
            i += 1
            if i >= len(toks) or toks[i] == ",":
                reqs.append(Requirement(key, "Exists"))
            elif toks[i] in ("=", "==", "!="):
                op = "NotIn" if toks[i] == "!=" else "In"
                need(i + 1 < len(toks) and toks[i + 1] not in (",", "(", ")"), "missing value")
                reqs.append(Requirement(key, op, (_value(toks[i + 1]),)))
                i += 2
            elif toks[i] in ("in", "notin"):
                op = "In" if toks[i] == "in" else "NotIn"
                need(i + 1 < len(toks) and toks[i + 1] == "(", "expected '('")
                i += 2
                vals = []
                while i < len(toks) and toks[i] != ")":
                    if toks[i] != ",":
                        vals.append(_value(toks[i]))
                    i += 1
                need(i < len(toks), "expected ')'")
                need(bool(vals), "empty value set")
                reqs.append(Requirement(key, op, tuple(vals)))
                i += 1
            else:
                raise SelectorError(f"unable to parse requirement: unexpected {toks[i]!r} in {s!r}")
        if i < len(toks):
            need(toks[i] == ",", "expected ','")
            i += 1
    return Selector(tuple(reqs))


_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _key(k: str) -> str:
    if not _KEY.match(k) or len(k.rsplit("/", 1)[-1]) > 63:
        raise SelectorError(f"invalid label key {k!r}")
    return k


def _value(v: str) -> str:
    if not _VALUE.match(v) or len(v) > 63:
        raise SelectorError(f"invalid label value {v!r}")
    return v


def from_label_selector(sel: Mapping[str, Any] | None, none_matches: bool = True) -> Selector:
    """A metav1.LabelSelector dict. A missing selector matches nothing (`none_matches`), an empty one
    everything."""
    if sel is None:
        return NOTHING if none_matches else EVERYTHING
    reqs = [Requirement(k, "In", (str(v),)) for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for expr in sel.get("matchExpressions") or []:
        op = expr.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise SelectorError(f"{op!r} is not a valid label selector operator")
        vals = tuple(str(v) for v in expr.get("values") or ())
        if op in ("In", "NotIn") and not vals:
            raise SelectorError("values: Required value: must be specified when `operator` is "
                                "'In' or 'NotIn'")
        if op in ("Exists", "DoesNotExist") and vals:
            raise SelectorError("values: Forbidden: may not be specified when `operator` is 'Exists' or "
                                "'DoesNotExist'")
        reqs.append(Requirement(expr["key"], op, vals))
    return Selector(tuple(reqs))


def label_selector_string(sel: Mapping[str, Any] | None) -> str:
    """A metav1.LabelSelector in the string form (metav1.LabelSelectorAsSelector(...).String()): requirements
    sorted by key, `k=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`."""
    reqs: list[tuple[str, str]] = [(k, f"{k}={v}") for k, v in (sel or {}).get("matchLabels", {}).items()]
    for e in (sel or {}).get("matchExpressions") or []:
        k, op = e.get("key", ""), e.get("operator")
        vals = ",".join(sorted(str(v) for v in e.get("values") or []))
        text = {"In": f"{k} in ({vals})", "NotIn": f"{k} notin ({vals})", "Exists": k,
                "DoesNotExist": f"!{k}"}.get(op or "")
        if text is None:
            raise SelectorError(f"{op!r} is not a valid label selector operator")
        reqs.append((k, text))
    return ",".join(t for _, t in sorted(reqs))


def from_node_selector_term(term: Mapping[str, Any]) -> tuple[Selector, Selector]:
    """A NodeSelectorTerm: (label selector over node labels, field selector over metadata.name)."""
    labels = [Requirement(e["key"], e["operator"], tuple(e.get("values") or ()))
              for e in term.get("matchExpressions") or []]
    fields = [Requirement(e["key"], e["operator"], tuple(e.get("values") or ()))
              for e in term.get("matchFields") or []]
    return Selector(tuple(labels)), Selector(tuple(fields))


def node_matches_selector_terms(node: Mapping[str, Any], terms: Iterable[Mapping[str, Any]]) -> bool:
    """Required node affinity: terms are ORed; an empty term matches nothing (as in Kubernetes)."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    for term in terms:
        if not term.get("matchExpressions") and not term.get("matchFields"):
            continue
        lsel, fsel = from_node_selector_term(term)
        if lsel.matches(labels) and fsel.matches({"metadata.name": meta.get("name", "")}):
            return True
    return False


# -- field selectors -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FieldRequirement:
    field: str
    op: str  # "=" or "!="
    value: str


def parse_field_selector(s: str | None) -> tuple[FieldRequirement, ...]:
    """`metadata.name=x,spec.nodeName!=y` (`==` is `=`)."""
    if s is None or not s.strip():
        return ()
    out = []
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        for op in ("!=", "==", "="):
            if op in part:
                field, _, value = part.partition(op)
                if not field.strip():
                    raise SelectorError(f"invalid field selector: {part!r}")
                out.append(FieldRequirement(field.strip(), "!=" if op == "!=" else "=", value.strip()))
                break
        else:
            raise SelectorError(f"invalid selector: '{part}'; can't understand '{part}'")
    return tuple(out)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string value of a dotted field path ("" when absent), as field selectors compare it."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def fields_match(obj: Mapping[str, Any], reqs: Iterable[FieldRequirement],
                 getter: Callable[[Mapping[str, Any], str], str] = field_value) -> bool:
    for r in reqs:
        v = getter(obj, r.field)
        if (v == r.value) != (r.op == "="):
            return False
    return True

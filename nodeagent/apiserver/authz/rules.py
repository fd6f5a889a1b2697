"""PolicyRule matching and coverage, as rbac's RuleAllows and validation.Covers: pure functions over the
rules' JSON shapes (`verbs`, `apiGroups`, `resources`, `resourceNames`, `nonResourceURLs`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from nodeagent.apiserver.authz.attributes import Attributes

Rule = dict[str, Any]


def _has(values: Sequence[str] | None, want: str) -> bool:
    return bool(values) and ("*" in values or want in values)  # type: ignore[operator]


def resource_matches(rule_resources: Sequence[str], combined: str, subresource: str) -> bool:
    for r in rule_resources:
        if r == "*" or r == combined:
            return True
        if subresource and len(r) == len(subresource) + 2 and r.startswith("*/") and r.endswith(subresource):
            return True
    return False


def url_matches(rule_urls: Sequence[str], path: str) -> bool:
    for u in rule_urls:
        if u == "*" or u == path:
            return True
        if u.endswith("*") and path.startswith(u.rstrip("*")):
            return True
    return False


def rule_allows(a: Attributes, rule: Rule) -> bool:
    if not rule_matches_but_name(a, rule):
        return False
    names = rule.get("resourceNames") or ()
    return not a.resource_request or not names or a.name in names


def rule_matches_but_name(a: Attributes, rule: Rule) -> bool:
    """Whether `rule` allows `a` but for its resourceNames (the part of a decision the object's name
    cannot change)."""
    if not _has(rule.get("verbs"), a.verb):
        return False
    if not a.resource_request:
        return url_matches(rule.get("nonResourceURLs") or (), a.path)
    if not _has(rule.get("apiGroups"), a.api_group):
        return False
    return resource_matches(rule.get("resources") or (), a.combined_resource, a.subresource)


def rules_allow(a: Attributes, rules: Iterable[Rule]) -> bool:
    return any(rule_allows(a, r) for r in rules)


# -- coverage (escalation checks) ------------------------------------------------------------------------


def _atoms(rule: Rule) -> list[Rule]:
    """A rule broken into one verb × one group × one resource × one name (validation.BreakdownRule)."""
    out: list[Rule] = []
    for verb in rule.get("verbs") or ():
        for group in rule.get("apiGroups") or ():
            for res in rule.get("resources") or ():
                names = rule.get("resourceNames") or ()
                if names:
                    out += [
                        {"verbs": [verb], "apiGroups": [group], "resources": [res], "resourceNames": [n]}
                        for n in names
                    ]
                else:
                    out.append({"verbs": [verb], "apiGroups": [group], "resources": [res]})
        for url in rule.get("nonResourceURLs") or ():
            out.append({"verbs": [verb], "nonResourceURLs": [url]})
    return out


def _covers_values(owner: Sequence[str], want: str) -> bool:
    return "*" in owner or want in owner


def _resource_covers(owner: Sequence[str], want: str) -> bool:
    if "*" in owner or want in owner:
        return True
    sub = want.split("/", 1)[1] if "/" in want else ""
    return bool(sub) and f"*/{sub}" in owner


def _url_covers(owner: Sequence[str], want: str) -> bool:
    for u in owner:
        if u == want:
            return True
        if u.endswith("*") and want.startswith(u.rstrip("*")):
            return True
    return False


def rule_covers(owner: Rule, atom: Rule) -> bool:
    verbs = owner.get("verbs") or ()
    if not _covers_values(verbs, atom["verbs"][0]):
        return False
    if "nonResourceURLs" in atom:
        return _url_covers(owner.get("nonResourceURLs") or (), atom["nonResourceURLs"][0])
    if not _covers_values(owner.get("apiGroups") or (), atom["apiGroups"][0]):
        return False
    if not _resource_covers(owner.get("resources") or (), atom["resources"][0]):
        return False
    names = owner.get("resourceNames") or ()
    if not names:
        return True
    want: list[str] = atom.get("resourceNames") or []
    return bool(want) and want[0] in names


def uncovered(owner: Sequence[Rule], servant: Iterable[Rule]) -> list[Rule]:
    """The parts of `servant` no rule of `owner` covers (empty: covered)."""
    missing = []
    for rule in servant:
        for atom in _atoms(rule):
            if not any(rule_covers(o, atom) for o in owner):
                missing.append(atom)
    return missing


def describe(rule: Rule) -> str:
    """A rule as kube prints it in an escalation error: {APIGroups:["apps"], Resources:["pods"], ...}."""
    parts = []
    for key, label in (
        ("apiGroups", "APIGroups"),
        ("resources", "Resources"),
        ("resourceNames", "ResourceNames"),
        ("nonResourceURLs", "NonResourceURLs"),
        ("verbs", "Verbs"),
    ):
        vals = rule.get(key)
        if vals:
            parts.append(f"{label}:[" + " ".join(f'"{v}"' for v in vals) + "]")
    return "{" + ", ".join(parts) + "}"

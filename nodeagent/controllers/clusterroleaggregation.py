"""ClusterRole aggregation (kube's clusterrole-aggregation controller, pure part): the rules of an aggregated
ClusterRole are the rules of every ClusterRole its `aggregationRule.clusterRoleSelectors` select, in name
order, each rule once."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nodeagent.api.selectors import from_label_selector


def aggregated_rules(role: dict[str, Any], roles: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    selectors = [from_label_selector(s) for s in
                 (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or ()]
    name = role["metadata"]["name"]
    out: list[dict[str, Any]] = []
    for other in sorted(roles, key=lambda r: r["metadata"]["name"]):
        if other["metadata"]["name"] == name:
            continue
        labels = other["metadata"].get("labels") or {}
        if not any(sel.matches(labels) for sel in selectors):
            continue
        for rule in other.get("rules") or ():
            if rule not in out:
                out.append(rule)
    return out

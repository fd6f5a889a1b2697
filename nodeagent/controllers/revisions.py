"""ControllerRevisions for DaemonSets and StatefulSets: the template history `kubectl rollout history/undo`
reads.

Pure decisions (pkg/controller/history): one revision per distinct pod template,
named <owner>-<hash>, labelled like the template (so the owner's selector finds
it) plus controller-revision-hash; `data` is the strategic-merge patch that puts
the template back. Going back to an old template bumps that revision's number to
the newest; revisions beyond revisionHistoryLimit that no pod uses are deleted.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.controllers import podutil

HASH_LABEL = "controller-revision-hash"
CHANGE_CAUSE = "kubernetes.io/change-cause"


def data_for(owner: Mapping[str, Any]) -> dict:
    template = copy.deepcopy((owner.get("spec") or {}).get("template") or {})
    template["$patch"] = "replace"
    return {"spec": {"template": template}}


def revision_object(owner: Mapping[str, Any], name: str, hash_value: str, number: int) -> dict:
    meta = owner["metadata"]
    labels = dict((((owner.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels")
                  or {})
    labels[HASH_LABEL] = hash_value
    out: dict[str, Any] = {
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": name, "namespace": meta.get("namespace"), "labels": labels,
                     "ownerReferences": [podutil.owner_reference(owner)]},
        "data": data_for(owner), "revision": number,
    }
    cause = (meta.get("annotations") or {}).get(CHANGE_CAUSE)
    if cause:
        out["metadata"]["annotations"] = {CHANGE_CAUSE: cause}
    return out


@dataclasses.dataclass
class Plan:
    create: dict | None = None
    renumber: tuple[Mapping[str, Any], int] | None = None  # (existing revision, its new number)
    delete: list[Mapping[str, Any]] = dataclasses.field(default_factory=list)
    number: int = 0  # the current template's revision number after the plan


def plan(owner: Mapping[str, Any], name: str, hash_value: str, revisions: Iterable[Mapping[str, Any]],
         in_use: set[str | None]) -> Plan:
    """`name` is the revision for the current template; `in_use` are hash label values pods still carry
    (None for a pod without one: then a revision without the label counts as in use too)."""
    revs = sorted(revisions, key=lambda r: int(r.get("revision") or 0))
    top = int(revs[-1].get("revision") or 0) if revs else 0
    mine = next((r for r in revs if r["metadata"]["name"] == name), None)
    out = Plan()
    if mine is None:
        out.number = top + 1
        out.create = revision_object(owner, name, hash_value, out.number)
    elif int(mine.get("revision") or 0) < top:
        out.number = top + 1
        out.renumber = (mine, out.number)
    else:
        out.number = int(mine.get("revision") or 0)
    limit = int((owner.get("spec") or {}).get("revisionHistoryLimit", 10))
    old = [r for r in revs if r["metadata"]["name"] != name
           and ((r.get("metadata") or {}).get("labels") or {}).get(HASH_LABEL) not in in_use]
    if len(old) > limit:
        out.delete = old[:len(old) - limit]
    return out

"""Field ownership for server-side apply: the set of fields an applied configuration sets, in Kubernetes'
FieldsV1 form (`f:<name>` for map keys, `k:{"name":"x"}` for list items by merge key, `.` for the item
itself), so a later apply by the same manager removes what it no longer sets.
"""

from __future__ import annotations

import json
from typing import Any

from nodeagent.api.patch import _merge_key  # the same merge keys strategic merge patch uses

Path = tuple[str, ...]


def fields_v1(obj: Any, parents: tuple[str, ...] = ()) -> dict[str, Any]:
    """The FieldsV1 tree of everything `obj` sets (lists without a merge key are owned whole)."""
    out: dict[str, Any] = {}
    if not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        if not parents and k in ("apiVersion", "kind", "status"):
            continue
        if parents == () and k == "metadata":
            v = {mk: mv for mk, mv in (v or {}).items() if mk in ("labels", "annotations", "finalizers",
                                                                  "ownerReferences")}
            if not v:
                continue
        key = f"f:{k}"
        if isinstance(v, dict):
            out[key] = fields_v1(v, parents + (k,)) or {}
        elif isinstance(v, list) and (mk := _merge_key(k, parents)) is not None \
                and all(isinstance(x, dict) for x in v):
            items: dict[str, Any] = {}
            for item in v:
                if mk in item:
                    items["k:" + json.dumps({mk: item[mk]}, separators=(",", ":"))] = {
                        ".": {}, **fields_v1(item, parents + (k,))}
            out[key] = items
        else:
            out[key] = {}
    return out


def leaves(tree: dict[str, Any], prefix: Path = ()) -> set[Path]:
    """Owned leaves: fields with no children, and list items (`k:` entries) as wholes."""
    out: set[Path] = set()
    for k, sub in tree.items():
        if k == ".":
            continue
        p = prefix + (k,)
        if k.startswith("k:"):
            out.add(p)
        if sub and any(c != "." for c in sub):
            out |= leaves(sub, p)
        elif not k.startswith("k:"):
            out.add(p)
    return out


def all_paths(tree: dict[str, Any], prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for k, sub in tree.items():
        if k != ".":
            out.add(prefix + (k,))
            out |= all_paths(sub or {}, prefix + (k,))
    return out


def _get(obj: Any, path: Path) -> Any:
    cur = obj
    for part in path:
        if part.startswith("f:") and isinstance(cur, dict):
            cur = cur.get(part[2:])
        elif part.startswith("k:") and isinstance(cur, list):
            want = json.loads(part[2:])
            cur = next((x for x in cur
                        if isinstance(x, dict) and all(x.get(a) == b for a, b in want.items())), None)
        else:
            return None
    return cur


def remove(obj: dict[str, Any], path: Path) -> None:
    """Delete the field or list item at `path` (missing parts are fine)."""
    cur: Any = obj
    for i, part in enumerate(path):
        last = i == len(path) - 1
        if part.startswith("f:"):
            name = part[2:]
            if not isinstance(cur, dict) or name not in cur:
                return
            if last:
                del cur[name]
                return
            cur = cur[name]
        elif part.startswith("k:"):
            want = json.loads(part[2:])
            if not isinstance(cur, list):
                return
            idx = next((j for j, x in enumerate(cur) if isinstance(x, dict)
                        and all(x.get(a) == b for a, b in want.items())), None)
            if idx is None:
                return
            if last:
                cur.pop(idx)
                return
            cur = cur[idx]
        else:
            return


def apply_ownership(merged: dict[str, Any], applied: dict[str, Any], manager: str, api_version: str,
                    now: str) -> None:
    """Drop from `merged` what `manager` applied before but no longer sets (unless another applier sets it),
    and record its new field set in metadata.managedFields."""
    meta = merged.setdefault("metadata", {})
    entries = [e for e in meta.get("managedFields") or [] if isinstance(e, dict)]
    new_tree = fields_v1(applied)
    prev = next((e for e in entries if e.get("manager") == manager and e.get("operation") == "Apply"), None)
    if prev is not None:
        others: set[Path] = set()
        for e in entries:
            if e is not prev and e.get("operation") == "Apply":
                others |= leaves(e.get("fieldsV1") or {})
        old_tree = prev.get("fieldsV1") or {}
        gone = leaves(old_tree) - leaves(new_tree) - others
        for p in sorted(gone, key=len):  # a list item before its fields: they go with it
            remove(merged, p)
        # maps and lists the manager set up and no longer mentions go too once nothing is left in them
        for p in sorted(all_paths(old_tree) - all_paths(new_tree) - gone, key=len, reverse=True):
            if _get(merged, p) in ({}, []):
                remove(merged, p)
    entries = [e for e in entries if not (e.get("manager") == manager and e.get("operation") == "Apply")]
    entries.append({"manager": manager, "operation": "Apply", "apiVersion": api_version, "time": now,
                    "fieldsType": "FieldsV1", "fieldsV1": new_tree})
    meta["managedFields"] = entries

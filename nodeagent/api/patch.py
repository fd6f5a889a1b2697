"""The three patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and strategic merge patch.

Strategic merge patch follows Kubernetes' patchMergeKey/patchStrategy tags for the fields kubectl
relies on (containers by name, ports by containerPort or port, ...) and its `$patch`,
`$setElementOrder/`, `$deleteFromPrimitiveList/` and `$retainKeys` directives.
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    """A patch that cannot be applied; the apiserver answers it with 422 (or 400 when unparsable)."""


# ---------------------------------------------------------------- JSON merge patch
def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# ---------------------------------------------------------------- JSON patch
def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer: {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    cur = doc
    for p in parts[:-1]:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            cur = cur[int(p)]
        else:
            raise PatchError(f"doc is missing path: {path}")
    return cur, parts[-1]


def _get(doc: Any, path: str) -> Any:
    cur = doc
    for p in _pointer(path):
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            cur = cur[int(p)]
        else:
            raise PatchError(f"doc is missing path: {path}")
    return cur


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent, last = _parent(doc, parts, path)
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"unable to remove nonexistent key: {last}: missing value")
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise PatchError(f"doc is missing path: {path}")


def _add(doc: Any, path: str, value: Any, replace: bool = False) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent, last = _parent(doc, parts, path)
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f"replace operation does not apply: doc is missing key: {path}")
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = value
            else:
                parent.insert(int(last), value)
        else:
            raise PatchError(f"unable to access invalid index: {last}")
    else:
        raise PatchError(f"doc is missing path: {path}")
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise PatchError("json patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid json patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op.get("value")), replace=True)
        elif kind == "move":
            v = _remove(doc, op["from"])
            doc = _add(doc, path, v)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"testing value {path} failed")
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc


# ---------------------------------------------------------------- strategic merge patch
# field name -> merge key, by the parent field when the same name means different things.
MERGE_KEYS: dict[str, str] = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "volumes": "name",
    "env": "name", "imagePullSecrets": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
    "conditions": "type", "addresses": "type", "taints": "key", "ownerReferences": "uid",
    "hostAliases": "ip", "topologySpreadConstraints": "topologyKey", "resourceClaims": "name",
    "readinessGates": "conditionType", "schedulingGates": "name",
    "webhooks": "name", "matchConditions": "name",  # admissionregistration's webhook configurations
}
SET_LISTS = {"finalizers"}  # primitive lists merged as sets


def _merge_key(field: str, parents: tuple[str, ...]) -> str | None:
    if field == "ports":
        return "containerPort" if parents and parents[-1] in ("containers", "initContainers",
                                                              "ephemeralContainers") else "port"
    if field == "addresses" and parents[-2:] == ("subsets",):
        return None
    return MERGE_KEYS.get(field)


def strategic_merge(original: Any, patch: Any, parents: tuple[str, ...] = ()) -> Any:
    """Apply a strategic merge patch to `original` (not modified) and return the result."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(original, dict):
        original = {}
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    out = dict(original)
    retain = patch.get("$retainKeys")
    orders: dict[str, list] = {}
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$setElementOrder/"):
            orders[k.split("/", 1)[1]] = v
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            if isinstance(out.get(field), list):
                out[field] = [x for x in out[field] if x not in (v or [])]
            continue
        if v is None:
            out.pop(k, None)
            continue
        cur = out.get(k)
        if isinstance(v, dict):
            merged = strategic_merge(cur, v, parents + (k,))
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        elif isinstance(v, list):
            out[k] = _merge_list(cur if isinstance(cur, list) else [], v, k, parents)
        else:
            out[k] = copy.deepcopy(v)
    for field, order in orders.items():
        if isinstance(out.get(field), list):
            out[field] = _reorder(out[field], order, _merge_key(field, parents))
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _merge_list(cur: list, patch: list, field: str, parents: tuple[str, ...]) -> list:
    if field in SET_LISTS:
        out = list(cur)
        for x in patch:
            if x not in out:
                out.append(x)
        return out
    key = _merge_key(field, parents)
    if key is None:
        if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
            return [copy.deepcopy(x) for x in patch if not (isinstance(x, dict) and "$patch" in x)]
        return copy.deepcopy(patch)
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [copy.deepcopy(x) for x in patch if not (isinstance(x, dict) and x.get("$patch"))]
    out = [copy.deepcopy(x) for x in cur]
    for item in patch:
        if not isinstance(item, dict):
            out.append(copy.deepcopy(item))
            continue
        kv = item.get(key)
        idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == kv), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(strategic_merge({}, item, parents + (field,)))
        else:
            out[idx] = strategic_merge(out[idx], item, parents + (field,))
    return out


def _reorder(items: list, order: list, key: str | None) -> list:
    """Sort items into `$setElementOrder`'s order; items it does not mention keep their place at the end."""
    def ident(x: Any) -> Any:
        return x.get(key) if key and isinstance(x, dict) else x

    pos = {}
    for i, o in enumerate(order or []):
        pos[repr(ident(o) if isinstance(o, dict) else o)] = i
    ranked = [(pos.get(repr(ident(x)), len(pos) + i), x) for i, x in enumerate(items)]
    return [x for _, x in sorted(ranked, key=lambda t: t[0])]

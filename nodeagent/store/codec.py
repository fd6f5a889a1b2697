"""How persistent backends (SQLite, etcd) store objects: compact JSON without a resourceVersion.

As the Kubernetes apiserver does with etcd, the revision lives beside the value
(the row's revision, etcd's mod_revision) and is put into metadata.resourceVersion
on every read, so a stored value never carries a stale one.
"""

from __future__ import annotations

import json

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False).encode
_loads = json.loads


def encode(obj: dict) -> str:
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "resourceVersion" in meta:
        obj = dict(obj)
        obj["metadata"] = {k: v for k, v in meta.items() if k != "resourceVersion"}
    return _dumps(obj)


def decode(text: str | bytes, revision: int) -> dict:
    """A fresh object (the caller owns it) with metadata.resourceVersion = `revision`."""
    obj = _loads(text)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    meta["resourceVersion"] = str(revision)
    return obj

"""How persistent backends (SQLite, etcd) store objects: compact JSON without a resourceVersion.

As the Kubernetes apiserver does with etcd, the revision lives beside the value
(the row's revision, etcd's mod_revision) and is put into metadata.resourceVersion
on every read, so a stored value never carries a stale one.
"""

from __future__ import annotations

import json

import orjson

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False).encode


def _loads(text: str | bytes) -> object:
    """orjson, which reuses one string per repeated key across the objects it decodes (a quarter less
    memory for the watch cache's copies), else the stdlib for what orjson refuses (NaN, lone surrogates)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def encode(obj: dict) -> str:
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "resourceVersion" in meta:
        obj = dict(obj)
        obj["metadata"] = {k: v for k, v in meta.items() if k != "resourceVersion"}
    return _dumps(obj)


def decode(text: str | bytes, revision: int) -> dict:
    """A fresh object (the caller owns it) with metadata.resourceVersion = `revision`."""
    obj = _loads(text)
    if not isinstance(obj, dict):
        raise ValueError(f"stored value is not a JSON object: {str(text)[:40]!r}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    meta["resourceVersion"] = str(revision)
    return obj

"""meta/v1 Status bodies in kube-apiserver's field order.

Go's encoding/json writes struct fields in declaration order, and clients compare kube-apiserver's bytes:
Status is kind, apiVersion, metadata, status, message, reason, details, code; StatusDetails is name,
group, kind, uid, causes, retryAfterSeconds; a StatusCause is reason, message, field. Empty fields
(`omitempty`) are left out, as Go leaves them out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_DETAILS_ORDER = ("name", "group", "kind", "uid", "causes", "retryAfterSeconds")
_CAUSE_ORDER = ("reason", "message", "field")


def _ordered(d: Mapping[str, Any], order: tuple[str, ...]) -> dict[str, Any]:
    out = {k: d[k] for k in order if d.get(k) not in (None, "")}
    out.update((k, v) for k, v in d.items() if k not in out and k not in order)
    return out


def ordered_details(details: Mapping[str, Any]) -> dict[str, Any]:
    """StatusDetails (and its causes) in Go's field order, empty fields omitted."""
    out = _ordered(details, _DETAILS_ORDER)
    if "causes" in out:
        out["causes"] = [_ordered(c, _CAUSE_ORDER) for c in out["causes"]]
    return out


def status_body(status: str, *, message: str = "", reason: str = "",
                details: Mapping[str, Any] | None = None, code: int = 0) -> dict[str, Any]:
    """A meta/v1 Status (`status` is "Success" or "Failure") as kube-apiserver serialises it."""
    out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": status}
    if message:
        out["message"] = message
    if reason:
        out["reason"] = reason
    if details is not None:
        out["details"] = ordered_details(details)
    if code:
        out["code"] = code
    return out

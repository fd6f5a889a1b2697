"""Kubernetes `Status` errors: one exception type, mapped to the wire at the HTTP boundary."""

from __future__ import annotations

from typing import Any

from nodeagent.api.status import status_body

CONFLICT_MSG = "the object has been modified; please apply your changes to the latest version and try again"


class ApiError(Exception):
    """An API failure that becomes a meta/v1 Status with `code` and `reason`."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.list_meta: dict[str, Any] = {}  # the Status's ListMeta (an expired continue's new token)

    def status(self) -> dict[str, Any]:
        out = status_body("Failure", message=self.message, reason=self.reason, details=self.details,
                          code=self.code)
        if self.list_meta:
            out["metadata"] = dict(self.list_meta)
        return out


def _qual(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(404, "NotFound", f'{_qual(resource, group)} "{name}" not found',
                    {"name": name, "group": group, "kind": resource}
                    if group else {"name": name, "kind": resource})


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    d = {"name": name, "kind": resource}
    if group:
        d["group"] = group
    return ApiError(409, "AlreadyExists", f'{_qual(resource, group)} "{name}" already exists', d)


def conflict(resource: str, name: str, group: str = "", why: str = CONFLICT_MSG) -> ApiError:
    d = {"name": name, "kind": resource}
    if group:
        d["group"] = group
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {_qual(resource, group)} "{name}": {why}', d)


def invalid(kind: str, name: str, causes: list[dict[str, str]], group: str = "") -> ApiError:
    """422 Invalid; each cause is {reason, message, field} as Kubernetes' field errors render."""
    msgs = "; ".join(f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes)
    qual = f"{kind}.{group}" if group else kind
    if len(causes) == 1:
        msg = f'{qual} "{name}" is invalid: {msgs}'
    else:
        msg = f'{qual} "{name}" is invalid: [{msgs.replace("; ", ", ")}]'
    d: dict[str, Any] = {"name": name, "kind": kind, "causes": causes}
    if group:
        d["group"] = group
    return ApiError(422, "Invalid", msg, d)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(user: str, verb: str, resource: str, group: str, namespace: str, name: str,
              why: str = "", kind: str = "") -> ApiError:
    """kube-apiserver's 403 for a refused request: `resource` as the request names it (`pods/log`), `kind`
    the resource alone (default: `resource` up to a slash)."""
    kind = kind or resource.split("/", 1)[0]
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    what = f'{_qual(kind, group)} "{name}"' if name else _qual(kind, group)
    msg = (f'{what} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
           f'in API group "{group}"{where}')
    if why:
        msg += f": {why}"
    d = {"kind": kind}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    return ApiError(403, "Forbidden", msg, d)


def forbidden_reason(resource: str, group: str, name: str, why: str) -> ApiError:
    """NewForbidden for a reason other than authorization (e.g. a budget's state)."""
    return ApiError(403, "Forbidden", f'{_qual(resource, group)} "{name}" is forbidden: {why}',
                    {"name": name, "group": group, "kind": resource})


def timeout(message: str, retry_after: int) -> ApiError:
    return ApiError(504, "Timeout", f"Timeout: {message}", {"retryAfterSeconds": retry_after})


def too_large_resource_version(wanted: int, current: int, retry_after: int) -> ApiError:
    """storage.NewTooLargeResourceVersionError: a read for a revision the server has not reached."""
    e = timeout(f"Too large resource version: {wanted}, current: {current}", retry_after)
    assert e.details is not None
    e.details["causes"] = [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
    return e


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def method_not_allowed(message: str = "the server does not allow this method on the requested "
                                      "resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_large(limit: int) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")


def unsupported_media(ctype: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType",
                    f'the body of the request was in an unknown format - accepted media types include: '
                    f'application/json, application/yaml (got "{ctype}")')


def not_acceptable(message: str) -> ApiError:
    return ApiError(406, "NotAcceptable", message)


def service_unavailable(message: str) -> ApiError:
    return ApiError(503, "ServiceUnavailable", message)


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")

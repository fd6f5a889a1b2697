"""Parse a Kubernetes API path and query into what the handlers need (resource, namespace, name, verb)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from nodeagent.api.resources import Resource, lookup
from nodeagent.apiserver import errors

_NS_SUBRESOURCES = {"status", "finalize"}


@dataclasses.dataclass
class RequestInfo:
    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str
    verb: str  # get list watch create update patch delete deletecollection
    patch_type: str = ""
    proxy_path: str = ""  # for nodes/<n>/proxy/<path>: the path on the kubelet


def parse(method: str, path: str, query: Mapping[str, str]) -> RequestInfo | None:
    """None for paths that are not resource paths (discovery etc.); ApiError(404) for unknown resources."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    watch_path = False
    if rest[0] == "watch":
        watch_path, rest = True, rest[1:]
    ns: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in _NS_SUBRESOURCES):
        ns, rest = rest[1], rest[2:]
    if not rest:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    res = lookup(group, version, rest[0])
    proxy_path = ""
    if res is not None and len(rest) > 3 and rest[2] == "proxy":
        proxy_path = "/" + "/".join(rest[3:])
        rest = rest[:3]
    if res is None or len(rest) > 3:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else ""
    if sub and sub not in res.subresources:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    if not res.namespaced and ns is not None:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    if res.namespaced and ns is None and name is not None:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    watch = watch_path or query.get("watch") in ("true", "1", "True")
    verb = {"GET": "get" if name else ("watch" if watch else "list"),
            "POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection"}.get(method)
    if verb is None or (verb == "create" and name and not sub) or (verb in ("update", "patch") and not name):
        raise errors.method_not_allowed()
    if watch and name and method == "GET":
        verb = "watch"
    return RequestInfo(res, ns, name, sub, verb, proxy_path=proxy_path)

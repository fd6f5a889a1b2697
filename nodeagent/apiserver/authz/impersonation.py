"""The impersonation filter (`kubectl --as/--as-group/--as-uid`, `Impersonate-*` headers): each thing asked
for is authorized with the `impersonate` verb on users, groups, serviceaccounts, uids or userextras, then
the request proceeds as the impersonated user (filters/impersonation.go)."""

from __future__ import annotations

from collections.abc import KeysView
from typing import Protocol
from urllib.parse import unquote

from nodeagent.api import sa_token
from nodeagent.apiserver import errors
from nodeagent.apiserver.authz.attributes import (
    ANONYMOUS_USER,
    AUTHENTICATED_GROUP,
    UNAUTHENTICATED_GROUP,
    Attributes,
    Subject,
    forbidden_message,
)
from nodeagent.apiserver.authz.chain import Authorizer
from nodeagent.apiserver.errors import ApiError

USER, GROUP, UID, EXTRA = "Impersonate-User", "Impersonate-Group", "Impersonate-Uid", "Impersonate-Extra-"
AUTHN_GROUP = "authentication.k8s.io"


class Headers(Protocol):
    """What the filter reads of a request's headers (a multidict: `getall` for repeated ones)."""

    def get(self, key: str, default: str) -> str: ...

    def keys(self) -> KeysView[str]: ...

    def getall(self, key: str, default: list[str]) -> list[str]: ...


def requested(headers: Headers) -> bool:
    return any(k.lower().startswith("impersonate-") for k in headers.keys())


def _denied(a: Attributes, reason: str) -> ApiError:
    what = f'{a.resource} "{a.name}"' if not a.api_group else f'{a.resource}.{a.api_group} "{a.name}"'
    msg = f"{what} is forbidden: {forbidden_message(a)}" + (f": {reason}" if reason else "")
    d = {"name": a.name, "kind": a.resource}
    if a.api_group:
        d["group"] = a.api_group
    return ApiError(403, "Forbidden", msg, d)


async def impersonate(headers: Headers, requester: Subject, authorizer: Authorizer) -> Subject:
    username = headers.get(USER, "")
    groups = [g for g in headers.getall(GROUP, []) if g]
    uid = headers.get(UID, "")
    extra: dict[str, list[str]] = {}
    for k in headers.keys():
        if k.lower().startswith(EXTRA.lower()):
            key = unquote(k[len(EXTRA) :]).lower()
            extra.setdefault(key, [])
            for v in headers.getall(k, []):
                if v not in extra[key]:
                    extra[key].append(v)
    if not username and (groups or extra or uid):
        asked = [f"{GROUP}={g}" for g in groups] + [f"{EXTRA}{k}={v}" for k, vs in extra.items() for v in vs]
        if uid:
            asked.append(f"{UID}={uid}")
        raise errors.bad_request(f"requested [{' '.join(asked)}] without impersonating a user")
    checks: list[Attributes] = [
        Attributes(requester, "impersonate", True, "", "groups", "", "", g) for g in groups
    ]
    sa = sa_token.split_username(username)
    if sa is not None:
        checks.insert(0, Attributes(requester, "impersonate", True, "", "serviceaccounts", "", sa[0], sa[1]))
        if not groups:  # a ServiceAccount's groups follow from its name: not asked for, not checked
            groups = list(sa_token.groups(sa[0]))
    else:
        checks.insert(0, Attributes(requester, "impersonate", True, "", "users", "", "", username))
    checks += [
        Attributes(requester, "impersonate", True, AUTHN_GROUP, "userextras", k, "", v)
        for k, vs in extra.items()
        for v in vs
    ]
    if uid:
        checks.append(Attributes(requester, "impersonate", True, AUTHN_GROUP, "uids", "", "", uid))
    for a in checks:
        ok, why = await authorizer.authorize(a)
        if not ok:
            raise _denied(a, why)
    if username == ANONYMOUS_USER:
        if UNAUTHENTICATED_GROUP not in groups:
            groups.append(UNAUTHENTICATED_GROUP)
    elif AUTHENTICATED_GROUP not in groups:
        groups.append(AUTHENTICATED_GROUP)
    return Subject(username, tuple(groups), uid, tuple((k, tuple(v)) for k, v in extra.items()))

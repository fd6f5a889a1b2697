"""authorization.k8s.io/v1 (SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectAccessReview,
SelfSubjectRulesReview) and authentication.k8s.io/v1 (TokenReview, SelfSubjectReview): computed on create,
never stored, answered with the authorizer chain requests themselves get."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from nodeagent.apiserver import errors
from nodeagent.apiserver.authz.attributes import Attributes, Subject
from nodeagent.apiserver.authz.chain import Authorizer
from nodeagent.apiserver.authz.rbac import RBACAuthorizer

AUTHZ, AUTHN = "authorization.k8s.io", "authentication.k8s.io"
REVIEWS = {
    (AUTHZ, "subjectaccessreviews"),
    (AUTHZ, "localsubjectaccessreviews"),
    (AUTHZ, "selfsubjectaccessreviews"),
    (AUTHZ, "selfsubjectrulesreviews"),
    (AUTHN, "tokenreviews"),
    (AUTHN, "selfsubjectreviews"),
}


@dataclasses.dataclass(frozen=True)
class TokenResult:
    """What a TokenReview reports: the subject (None: not authenticated), the audiences the token holds of
    those asked, and the authenticator's error."""

    subject: Subject | None
    audiences: list[str]
    error: str = ""


TokenAuthenticator = Callable[[str, list[str]], Awaitable[TokenResult]]


def _invalid(kind: str, field: str, message: str, group: str = AUTHZ) -> errors.ApiError:
    return errors.invalid(
        kind, "", [{"reason": "FieldValueInvalid", "field": field, "message": message}], group
    )


def _spec(body: Any, kind: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise errors.bad_request(f"the body must be a {kind}")
    spec = body.get("spec")
    return spec if isinstance(spec, dict) else {}


def _answer(body: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    out = dict(body)
    meta = dict(out.get("metadata") or {})
    meta.setdefault("creationTimestamp", None)
    out["metadata"] = meta
    out["status"] = status
    return out


def _extra(spec_extra: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(spec_extra, dict):
        return ()
    return tuple((str(k), tuple(str(x) for x in (v or ()))) for k, v in spec_extra.items())


def _attributes(subject: Subject, spec: dict[str, Any], kind: str) -> Attributes:
    ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if ra and nra:
        raise _invalid(
            kind,
            "spec.resourceAttributes",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )
    if isinstance(nra, dict):
        return Attributes(subject, str(nra.get("verb") or ""), False, path=str(nra.get("path") or ""))
    if not isinstance(ra, dict):
        raise _invalid(
            kind,
            "spec.resourceAttributes",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )
    return Attributes(
        subject,
        str(ra.get("verb") or ""),
        True,
        str(ra.get("group") or ""),
        str(ra.get("resource") or ""),
        str(ra.get("subresource") or ""),
        str(ra.get("namespace") or ""),
        str(ra.get("name") or ""),
    )


async def _decide(authorizer: Authorizer, a: Attributes) -> dict[str, Any]:
    allowed, why = await authorizer.authorize(a)
    status: dict[str, Any] = {"allowed": allowed}
    if why:
        status["reason"] = why
    return status


def _subject_of_spec(spec: dict[str, Any], kind: str) -> Subject:
    user, groups = spec.get("user") or "", list(spec.get("groups") or [])
    if not user and not groups:
        raise _invalid(kind, "spec.user", "at least one of user or group must be specified")
    return Subject(
        str(user), tuple(str(g) for g in groups), str(spec.get("uid") or ""), _extra(spec.get("extra"))
    )


def _user_info(s: Subject) -> dict[str, Any]:
    info: dict[str, Any] = {"username": s.name, "groups": list(s.groups)}
    if s.uid:
        info["uid"] = s.uid
    if s.extra:
        info["extra"] = {k: list(v) for k, v in s.extra}
    return info


def rules_review(rbac: RBACAuthorizer, subject: Subject, namespace: str) -> dict[str, Any]:
    rules, missing = rbac.rules_for(subject, namespace)
    res_rules, url_rules = [], []
    for rule in rules:
        if rule.get("nonResourceURLs"):
            url_rules.append(
                {"verbs": list(rule.get("verbs") or ()), "nonResourceURLs": list(rule["nonResourceURLs"])}
            )
        else:
            out = {
                "verbs": list(rule.get("verbs") or ()),
                "apiGroups": list(rule.get("apiGroups") or ()),
                "resources": list(rule.get("resources") or ()),
            }
            if rule.get("resourceNames"):
                out["resourceNames"] = list(rule["resourceNames"])
            res_rules.append(out)
    status: dict[str, Any] = {
        "resourceRules": res_rules,
        "nonResourceRules": url_rules,
        "incomplete": bool(missing),
    }
    if missing:
        status["evaluationError"] = ", ".join(missing)
    return status


async def review(
    resource: str,
    namespace: str,
    body: Any,
    requester: Subject,
    authorizer: Authorizer,
    tokens: TokenAuthenticator,
) -> dict[str, Any]:
    """The answered review object for a create of `resource` (one of REVIEWS' names)."""
    if resource == "selfsubjectaccessreviews":
        spec = _spec(body, "SelfSubjectAccessReview")
        return _answer(
            body, await _decide(authorizer, _attributes(requester, spec, "SelfSubjectAccessReview"))
        )
    if resource == "subjectaccessreviews":
        spec = _spec(body, "SubjectAccessReview")
        subject = _subject_of_spec(spec, "SubjectAccessReview")
        return _answer(body, await _decide(authorizer, _attributes(subject, spec, "SubjectAccessReview")))
    if resource == "localsubjectaccessreviews":
        spec = _spec(body, "LocalSubjectAccessReview")
        if spec.get("nonResourceAttributes"):
            raise errors.bad_request("disallowed on this kind of request")
        ra = spec.get("resourceAttributes") if isinstance(spec.get("resourceAttributes"), dict) else None
        if ra is not None:
            if not ra.get("namespace"):
                ra["namespace"] = namespace
            elif ra["namespace"] != namespace:
                raise errors.bad_request(
                    f"spec.resourceAttributes.namespace must match namespace: {namespace}"
                )
        subject = _subject_of_spec(spec, "LocalSubjectAccessReview")
        return _answer(
            body, await _decide(authorizer, _attributes(subject, spec, "LocalSubjectAccessReview"))
        )
    if resource == "selfsubjectrulesreviews":
        spec = _spec(body, "SelfSubjectRulesReview")
        ns = str(spec.get("namespace") or "")
        return _answer(body, rules_review(authorizer.rbac, requester, ns))
    if resource == "selfsubjectreviews":
        body = body if isinstance(body, dict) else {"apiVersion": f"{AUTHN}/v1", "kind": "SelfSubjectReview"}
        return _answer(body, {"userInfo": _user_info(requester)})
    if resource == "tokenreviews":
        spec = _spec(body, "TokenReview")
        token = spec.get("token") or ""
        if not token:
            raise _invalid("TokenReview", "spec.token", "Required value", AUTHN)
        audiences = [str(a) for a in spec.get("audiences") or ()]
        found = await tokens(str(token), audiences)
        if found.subject is None:  # kube's status: authenticated false, the authenticator's error
            return _answer(body, {"user": {}, "error": found.error or "invalid bearer token"})
        st: dict[str, Any] = {"authenticated": True, "user": _user_info(found.subject)}
        if found.audiences:
            st["audiences"] = found.audiences
        return _answer(body, st)
    raise errors.not_found(resource, "")

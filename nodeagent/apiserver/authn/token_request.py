"""`serviceaccounts/<name>/token` (TokenRequest, authentication.k8s.io/v1): kube-apiserver's token REST
storage — validation, the bound object's lookup, the expiration rules, and the signed JWT."""

from __future__ import annotations

from typing import Any

from nodeagent.api import sa_token
from nodeagent.api.times import rfc3339
from nodeagent.apiserver import auth, errors
from nodeagent.apiserver.authn.serviceaccount import (
    NODES,
    PODS,
    SECRETS,
    SERVICE_ACCOUNTS,
    ServiceAccountKeys,
)
from nodeagent.apiserver.registry import Registry
from nodeagent.clock import REAL_CLOCK, Clock

KIND = "TokenRequest"
API_VERSION = "authentication.k8s.io/v1"
_BOUND = {"Pod": PODS, "Secret": SECRETS, "Node": NODES}


def _invalid(name: str, field: str, value: Any, detail: str) -> errors.ApiError:
    return errors.invalid(KIND, name, [{"type": "FieldValueInvalid", "field": field,
                                         "message": f"Invalid value: {value!r}: {detail}"}],
                          "authentication.k8s.io")


def validate(name: str, body: Any) -> dict[str, Any]:
    """The request's spec with kube's defaults, or Invalid with the field at fault."""
    if not isinstance(body, dict):
        raise errors.bad_request("the body must be a TokenRequest")
    spec = body.get("spec") or {}
    if not isinstance(spec, dict):
        raise errors.bad_request("spec: must be an object")
    exp = spec.get("expirationSeconds")
    if exp is None:  # kubectl sends null when --duration is not given
        exp = sa_token.DEFAULT_EXPIRATION
    if isinstance(exp, bool) or not isinstance(exp, int):
        raise _invalid(name, "spec.expirationSeconds", exp, "must be an integer")
    if exp < sa_token.MIN_EXPIRATION:
        raise _invalid(name, "spec.expirationSeconds", exp,
                       "may not specify a duration less than 10 minutes")
    if exp > sa_token.MAX_EXPIRATION:
        raise _invalid(name, "spec.expirationSeconds", exp,
                       "may not specify a duration larger than 2^32 seconds")
    auds = spec.get("audiences") or []
    if not isinstance(auds, list) or not all(isinstance(a, str) and a for a in auds):
        raise _invalid(name, "spec.audiences", auds, "must be a list of non-empty strings")
    ref = spec.get("boundObjectRef")
    if ref is not None and (not isinstance(ref, dict) or not ref.get("name")):
        raise _invalid(name, "spec.boundObjectRef.name", ref, "a bound object needs a name")
    return {"audiences": list(auds), "expirationSeconds": exp, "boundObjectRef": ref}


async def create(registry: Registry, keys: ServiceAccountKeys, user: auth.User, namespace: str, name: str,
                 body: Any, clock: Clock = REAL_CLOCK) -> dict[str, Any]:
    """The TokenRequest answered: status.token signed, status.expirationTimestamp as asked."""
    spec = validate(name, body)
    sa = await registry.get(SERVICE_ACCOUNTS, namespace, name)  # NotFound: serviceaccounts "x" not found
    if sa["metadata"].get("deletionTimestamp"):
        raise errors.bad_request(f"cannot create a token for serviceaccount {name!r}: it is being deleted")
    bound: dict[str, dict[str, Any] | None] = {"Pod": None, "Secret": None, "Node": None}
    ref = spec["boundObjectRef"]
    if ref is not None:
        kind, api_version = ref.get("kind", ""), ref.get("apiVersion", "v1") or "v1"
        if kind not in _BOUND or api_version != "v1":
            raise errors.bad_request(f"cannot bind token to object of type {api_version}, Kind={kind}")
        res = _BOUND[kind]
        obj = await registry.get(res, namespace if res.namespaced else None, ref["name"])
        uid = obj["metadata"].get("uid", "")
        if ref.get("uid") and ref["uid"] != uid:
            raise errors.conflict(kind, ref["name"], "", f"the UID in the bound object reference "
                                  f"({ref['uid']}) does not match the UID in record. The object might have "
                                  "been deleted and then recreated")
        bound[kind] = obj
        spec["boundObjectRef"] = {"kind": kind, "apiVersion": "v1", "name": ref["name"], "uid": uid}
    pod = bound["Pod"]
    if pod is not None:
        if (pod.get("spec") or {}).get("serviceAccountName", "default") != name:
            raise errors.bad_request(f"cannot bind token for serviceaccount {name!r} to pod running with "
                                     "different serviceaccount name.")
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name and bound["Node"] is None:
            try:
                bound["Node"] = await registry.get(NODES, None, node_name)
            except errors.ApiError:
                bound["Node"] = {"metadata": {"name": node_name}}  # the node's name alone, as kube does
    node = user.node_name
    if node is not None and (pod is None or (pod.get("spec") or {}).get("nodeName") != node):
        raise errors.forbidden(user.name, "create", "serviceaccounts", "", namespace, name,
                               f"node {node!r} can only create tokens bound to pods on it")
    if not spec["audiences"]:
        spec["audiences"] = list(keys.api_audiences)
    requested = spec["expirationSeconds"]
    expiration, warn_after = requested, None
    now = int(clock.now())
    if pod is not None and requested == sa_token.WARN_ONLY_EXPIRATION \
            and set(spec["audiences"]) <= set(keys.api_audiences):
        expiration, warn_after = sa_token.EXTENDED_EXPIRATION, now + requested
    claims = sa_token.bound_claims(keys.issuer, spec["audiences"], sa, now, expiration, pod=pod,
                                   secret=bound["Secret"], node=bound["Node"], warn_after=warn_after)
    if spec["boundObjectRef"] is None:
        del spec["boundObjectRef"]
    return {"kind": KIND, "apiVersion": API_VERSION,
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": spec,
            "status": {"token": keys.sign(claims), "expirationTimestamp": rfc3339(now + requested)}}

"""Bootstrap tokens on the apiserver (kube-apiserver's `--enable-bootstrap-token-auth`): who a token is,
what a joining node may do before it has its own identity, and what anyone may read unauthenticated.

A live token Secret (`kube-system/bootstrap-token-<id>`, allowed for authentication, not expired)
authenticates as `system:bootstrap:<id>` in system:bootstrappers (plus its auth-extra-groups). Such a user
gets kubeadm's system:node-bootstrapper role: create CertificateSigningRequests and read them (plus delete
its own, so a refused join leaves nothing behind). Anonymous clients get only kubeadm's public cluster-info.
A created CSR records who asked (spec.username/groups), as the CSR registry strategy does; the controller
manager's csrapproving controller decides on that.
"""

from __future__ import annotations

import logging
from typing import Any

from nodeagent.api import bootstrap_token as tokens
from nodeagent.api.resources import builtin
from nodeagent.apiserver import auth
from nodeagent.clock import REAL_CLOCK, Clock, utcnow
from nodeagent.store import base as store_base

log = logging.getLogger("nodeagent.apiserver.bootstrap_auth")
SECRETS = builtin("", "v1", "secrets")
ANONYMOUS_USER = "system:anonymous"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
CLUSTER_INFO_NS, CLUSTER_INFO_NAME = "kube-public", "cluster-info"
CSR_GROUP, CSR_RESOURCE = "certificates.k8s.io", "certificatesigningrequests"


class BootstrapTokenAuthenticator:
    """Bearer bootstrap tokens, checked against their Secret in the watch cache (else the store)."""

    def __init__(self, store: Any, cache: Any = None, clock: Clock = REAL_CLOCK) -> None:
        self.store = store
        self.cache = cache
        self.clock = clock

    async def authenticate(self, header: str | None) -> auth.User | None:
        """A live bootstrap token: system:bootstrap:<id> in system:bootstrappers; anything else: None."""
        if not header or not header.startswith("Bearer "):
            return None
        value = header[7:].strip()
        if not tokens.is_token(value):
            return None
        tid, tsecret = tokens.parse_token(value)
        secret = await self.get(SECRETS.key(tokens.NAMESPACE, tokens.SECRET_PREFIX + tid))
        if secret is None:
            return None
        try:
            fields = tokens.check_secret(secret, tid, tsecret, "authentication", utcnow(self.clock))
        except tokens.TokenError as e:
            log.info("bootstrap token %s refused: %s", tid, e)
            return None
        return auth.User(tokens.USER_PREFIX + tid, tokens.token_groups(fields))

    async def get(self, key: str) -> dict[str, Any] | None:
        entry = self.cache.get(key) if self.cache is not None else None
        if entry is not None:
            return entry.obj
        try:
            return await self.store.get(key)
        except store_base.NotFound:
            return None


def record_requester(body: Any, user: auth.User) -> None:
    """A new CertificateSigningRequest names who asked (spec.username/groups), as the CSR strategy does."""
    if isinstance(body, dict):
        spec = body.setdefault("spec", {})
        groups = list(user.groups)
        if "system:authenticated" not in groups:
            groups.append("system:authenticated")
        spec["username"], spec["groups"] = user.name, groups
        spec.pop("uid", None)


def is_cluster_info(verb: str, group: str, resource: str, subresource: str, namespace: str,
                    name: str) -> bool:
    return (verb == "get" and not group and resource == "configmaps" and not subresource
            and namespace == CLUSTER_INFO_NS and name == CLUSTER_INFO_NAME)


def may(user_name: str, groups: tuple[str, ...], verb: str, group: str, resource: str, subresource: str,
        namespace: str, name: str, stored: dict[str, Any] | None) -> str | None:
    """None when allowed, else why not (for users that are neither admins nor nodes)."""
    if is_cluster_info(verb, group, resource, subresource, namespace, name):
        return None
    csrs = group == CSR_GROUP and resource == CSR_RESOURCE and not subresource
    if tokens.BOOTSTRAPPERS_GROUP in groups and csrs:
        if verb in ("create", "get", "list", "watch"):
            return None
        if verb == "delete" and ((stored or {}).get("spec") or {}).get("username") == user_name:
            return None
        return f"a bootstrap token may only create and read certificate signing requests (not {verb})"
    if UNAUTHENTICATED_GROUP in groups:
        return "anonymous access is limited to kube-public/cluster-info"
    return f"no rule allows {user_name} to {verb} {resource}"

"""kube-apiserver's authorizer chain: system:masters first (the privileged-group authorizer), then Node,
then RBAC, then the kubeadm bootstrap-token clause RBAC cannot say (a bootstrapper deletes only its own
CertificateSigningRequest). The first ALLOW wins; the reasons of those that had none are joined."""

from __future__ import annotations

import contextlib
from typing import Any

from nodeagent.apiserver import bootstrap_auth
from nodeagent.apiserver.authz import node
from nodeagent.apiserver.authz.attributes import MASTERS_GROUP, Attributes, Decision
from nodeagent.apiserver.authz.rbac import RBACAuthorizer, Source
from nodeagent.store import base as store_base


class Authorizer:
    def __init__(self, source: Source, get: node.Getter) -> None:
        self.rbac = RBACAuthorizer(source)
        self.node = node.NodeAuthorizer(source, get)
        self.get = get

    async def authorize(self, a: Attributes, key: str | None = None, body: Any = None) -> tuple[bool, str]:
        """(allowed, reason); `key` and `body` serve the Node authorizer's checks of the object."""
        if MASTERS_GROUP in a.subject.groups:
            return True, ""
        await self.rbac.source.wait_fresh()  # a binding written a moment ago counts (read-your-writes)
        reasons = []
        decision, why = await self.node.authorize(a, key, body)
        if decision is Decision.ALLOW:
            return True, ""
        if why:
            reasons.append(why)
        decision, why = self.rbac.authorize(a)
        if decision is Decision.ALLOW:
            return True, ""
        if why:
            reasons.append(why)
        if await self._bootstrapper_deletes_own_csr(a, key):
            return True, ""
        return False, ", ".join(reasons)

    async def _bootstrapper_deletes_own_csr(self, a: Attributes, key: str | None) -> bool:
        if not (
            a.verb == "delete"
            and a.resource == bootstrap_auth.CSR_RESOURCE
            and key is not None
            and a.api_group == bootstrap_auth.CSR_GROUP
            and not a.subresource
        ):
            return False
        stored = None
        with contextlib.suppress(store_base.NotFound):
            stored = await self.get(key)
        return (
            bootstrap_auth.may(
                a.subject.name,
                a.subject.groups,
                a.verb,
                a.api_group,
                a.resource,
                "",
                a.namespace,
                a.name,
                stored,
            )
            is None
        )

"""The Node authorizer for users in system:nodes named system:node:<name> (kube's node authorizer with
NodeRestriction's limits on writes, as `auth.node_may` states them); anything it refuses falls through to
RBAC, as kube's chain does (system:node's ClusterRole has no binding by default)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from nodeagent.apiserver import auth
from nodeagent.apiserver.authz.attributes import Attributes, Decision
from nodeagent.store import base as store_base

Getter = Callable[[str], Awaitable[dict[str, Any]]]


def node_name(a: Attributes) -> str | None:
    if auth.NODES_GROUP in a.subject.groups and a.subject.name.startswith("system:node:"):
        return a.subject.name[len("system:node:") :]
    return None


async def authorize(a: Attributes, key: str | None, body: Any, get: Getter) -> tuple[Decision, str]:
    """`key`: the object's store key (None for collections); `body`: a create's object."""
    node = node_name(a)
    if node is None or not a.resource_request:
        return Decision.NO_OPINION, ""
    stored = None
    if key is not None and a.verb not in auth.READ_VERBS:
        with contextlib.suppress(store_base.NotFound):
            stored = await get(key)
    obj = body if a.verb == "create" and not a.subresource else stored
    why = auth.node_may(
        node, a.verb, a.resource, a.subresource, a.namespace, a.name, obj if isinstance(obj, dict) else None
    )
    if why is None:
        return Decision.ALLOW, ""
    return Decision.NO_OPINION, why

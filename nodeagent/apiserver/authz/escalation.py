"""Escalation prevention on RBAC writes (registry/rbac's policybased storage): a Role or ClusterRole may
only grant what its writer holds, a binding only a role whose rules its writer holds, unless the writer may
`escalate` (roles) or `bind` (the referenced role), or is in system:masters. The requester is the request's
(a context variable the handlers set, as kube carries the user in the request context); writes with none
(the apiserver's own: bootstrap policy) are not checked."""

from __future__ import annotations

import contextvars
from typing import Any

from nodeagent.apiserver import errors
from nodeagent.apiserver.authz.attributes import MASTERS_GROUP, Attributes, Subject
from nodeagent.apiserver.authz.chain import Authorizer
from nodeagent.apiserver.authz.rbac import GROUP
from nodeagent.apiserver.authz.rules import Rule, describe, uncovered
from nodeagent.apiserver.errors import ApiError

REQUESTER: contextvars.ContextVar[Subject | None] = contextvars.ContextVar("requester", default=None)
_KINDS = {"Role": "roles", "ClusterRole": "clusterroles"}


def _go_strings(values: tuple[str, ...]) -> str:
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


class EscalationCheck:
    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    async def __call__(
        self, resource: str, group: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        subject = REQUESTER.get()
        if group != GROUP or subject is None or MASTERS_GROUP in subject.groups:
            return
        meta = obj.get("metadata") or {}
        ns, name = meta.get("namespace") or "", meta.get("name") or ""
        if resource in ("roles", "clusterroles"):
            await self._role(subject, resource, ns, name, obj, old)
        elif resource in ("rolebindings", "clusterrolebindings"):
            await self._binding(subject, resource, ns, name, obj, old)

    async def _allowed(self, subject: Subject, verb: str, resource: str, ns: str, name: str) -> bool:
        a = Attributes(subject, verb, True, GROUP, resource, "", ns, name)
        return (await self.authorizer.authorize(a))[0]

    async def _role(
        self,
        subject: Subject,
        resource: str,
        ns: str,
        name: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> None:
        if (
            old is not None
            and old.get("rules") == obj.get("rules")
            and old.get("aggregationRule") == obj.get("aggregationRule")
        ):
            return
        if await self._allowed(subject, "escalate", resource, ns, name):
            return
        if obj.get("aggregationRule") or (old or {}).get("aggregationRule"):
            raise errors.forbidden_reason(
                resource, GROUP, name, "must have cluster-admin privileges to use the aggregationRule"
            )
        self._confirm(subject, resource, ns, name, list(obj.get("rules") or ()))

    async def _binding(
        self,
        subject: Subject,
        resource: str,
        ns: str,
        name: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> None:
        if (
            old is not None
            and old.get("roleRef") == obj.get("roleRef")
            and old.get("subjects") == obj.get("subjects")
        ):
            return
        ref = obj.get("roleRef") or {}
        kind, role_name = ref.get("kind") or "", ref.get("name") or ""
        role_res = _KINDS.get(kind)
        if role_res is None:
            return  # validation refuses it
        if await self._allowed(subject, "bind", role_res, ns, role_name):
            return
        ix = self.authorizer.rbac.index()
        rules = ix.role_rules((kind, ns if kind == "Role" else "", role_name))
        if rules is None:
            raise ApiError(
                404,
                "NotFound",
                f'{role_res}.{GROUP} "{role_name}" not found',
                {"name": role_name, "group": GROUP, "kind": role_res},
            )
        self._confirm(subject, resource, ns, name, rules)

    def _confirm(self, subject: Subject, resource: str, ns: str, name: str, rules: list[Rule]) -> None:
        held, missing_refs = self.authorizer.rbac.rules_for(subject, ns)
        missing = uncovered(held, rules)
        if not missing:
            return
        msg = (
            f'user "{subject.name}" (groups={_go_strings(subject.groups)}) is attempting to grant RBAC '
            "permissions not currently held:\n" + "\n".join(describe(m) for m in missing)
        )
        if missing_refs:
            msg += "; resolution errors: [" + ", ".join(missing_refs) + "]"
        raise errors.forbidden_reason(resource, GROUP, name, msg)

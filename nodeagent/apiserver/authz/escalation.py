"""Escalation prevention on RBAC writes (registry/rbac's policybased storage): a Role or ClusterRole may
only grant what its writer holds, a binding only a role whose rules its writer holds, unless the writer may
`escalate` (roles) or `bind` (the referenced role), or is in system:masters. The requester is the request's
(a context variable the handlers set, as kube carries the user in the request context); writes with none
(the apiserver's own: bootstrap policy) are not checked."""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any

from nodeagent.apiserver import errors
from nodeagent.apiserver.authz.attributes import MASTERS_GROUP, Attributes, Subject
from nodeagent.apiserver.authz.chain import Authorizer
from nodeagent.apiserver.authz.rbac import GROUP
from nodeagent.apiserver.authz.rules import Rule, describe, uncovered
from nodeagent.apiserver.errors import ApiError

REQUESTER: contextvars.ContextVar[Subject | None] = contextvars.ContextVar("requester", default=None)
_KINDS = {"Role": "roles", "ClusterRole": "clusterroles"}
# what an update must change before it is checked again: the fields that grant something
_ROLE_FIELDS = ("rules", "aggregationRule")
_BINDING_FIELDS = ("roleRef", "subjects")
_GRANTING_FIELDS = {"roles": _ROLE_FIELDS, "clusterroles": _ROLE_FIELDS,
                    "rolebindings": _BINDING_FIELDS, "clusterrolebindings": _BINDING_FIELDS}


@dataclasses.dataclass(frozen=True)
class _Write:
    """One RBAC object's create or update (old is None on create), by `subject`."""

    subject: Subject
    resource: str
    ns: str
    name: str
    obj: dict[str, Any]
    old: dict[str, Any] | None


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
        fields = _GRANTING_FIELDS.get(resource)
        if fields is None or (old is not None and all(old.get(f) == obj.get(f) for f in fields)):
            return  # not RBAC, or nothing that grants anything changed
        meta = obj.get("metadata") or {}
        w = _Write(subject, resource, meta.get("namespace") or "", meta.get("name") or "", obj, old)
        if resource in ("roles", "clusterroles"):
            await self._role(w)
        else:
            await self._binding(w)

    async def _allowed(self, subject: Subject, verb: str, resource: str, ns: str, name: str) -> bool:
        a = Attributes(subject, verb, True, GROUP, resource, "", ns, name)
        return (await self.authorizer.authorize(a))[0]

    async def _role(self, w: _Write) -> None:
        if await self._allowed(w.subject, "escalate", w.resource, w.ns, w.name):
            return
        if w.obj.get("aggregationRule") or (w.old or {}).get("aggregationRule"):
            raise errors.forbidden_reason(
                w.resource, GROUP, w.name, "must have cluster-admin privileges to use the aggregationRule"
            )
        self._confirm(w.subject, w.resource, w.ns, w.name, list(w.obj.get("rules") or ()))

    async def _binding(self, w: _Write) -> None:
        ref = w.obj.get("roleRef") or {}
        kind, role_name = ref.get("kind") or "", ref.get("name") or ""
        role_res = _KINDS.get(kind)
        if role_res is None:
            return  # validation refuses it
        if await self._allowed(w.subject, "bind", role_res, w.ns, role_name):
            return
        ix = self.authorizer.rbac.index()
        rules = ix.role_rules((kind, w.ns if kind == "Role" else "", role_name))
        if rules is None:
            raise ApiError(
                404,
                "NotFound",
                f'{role_res}.{GROUP} "{role_name}" not found',
                {"name": role_name, "group": GROUP, "kind": role_res},
            )
        self._confirm(w.subject, w.resource, w.ns, w.name, rules)

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

"""The RBAC authorizer (plugin/pkg/auth/authorizer/rbac): the rules bound to a subject by
ClusterRoleBindings, and in a namespace by its RoleBindings, read from the watch cache.

Bindings are indexed by subject (a user name, a ServiceAccount as its user name, or a group); the index is
rebuilt only after an RBAC object changed (a watch on the RBAC group's keys says when), so a request costs
a few dictionary lookups and the rules of the roles bound to its subject, however many bindings exist.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Protocol

from nodeagent.api import sa_token
from nodeagent.api.resources import builtin
from nodeagent.apiserver.authz.attributes import Attributes, Decision, Subject
from nodeagent.apiserver.authz.decision_cache import DecisionCache
from nodeagent.apiserver.authz.rules import Rule, rule_matches_but_name, rules_allow

GROUP = "rbac.authorization.k8s.io"
# the four kinds' store prefixes (kube-apiserver's layout: /registry/roles/, /registry/clusterroles/, ...)
ROLES, ROLE_BINDINGS, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS = (
    builtin(GROUP, "v1", name).storage_prefix
    for name in ("roles", "rolebindings", "clusterroles", "clusterrolebindings"))
PREFIXES = (ROLES, ROLE_BINDINGS, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS)

RoleRef = tuple[str, str, str]  # (kind, namespace of a Role or "", name)


class Source(Protocol):
    """What the authorizer reads: the watch cache's list, subscribe and freshness."""

    rev: int

    def list(self, res_prefix: str, ns: str | None) -> tuple[list[Any], int]: ...

    def subscribe(self, prefix: str, since: int | None, initial: bool = False) -> Any: ...

    def unsubscribe(self, sub: Any) -> None: ...

    async def wait_fresh(self, limit_s: float = 10.0) -> None: ...


def subject_keys(s: Subject) -> list[str]:
    return ["u:" + s.name] + ["g:" + g for g in s.groups]


def binding_subject_keys(subject: dict[str, Any], binding_ns: str) -> str | None:
    kind, name = subject.get("kind"), subject.get("name") or ""
    if kind == "User":
        return "u:" + name
    if kind == "Group":
        return "g:" + name
    if kind == "ServiceAccount":
        return "u:" + sa_token.username(subject.get("namespace") or binding_ns, name)
    return None


class Index:
    """Roles' rules by name and bindings' role references by subject key."""

    def __init__(self) -> None:
        self.cluster_roles: dict[str, list[Rule]] = {}
        self.roles: dict[tuple[str, str], list[Rule]] = {}
        self.cluster_bindings: dict[str, list[RoleRef]] = {}
        self.bindings: dict[str, dict[str, list[RoleRef]]] = {}  # ns -> subject key -> refs

    @classmethod
    def build(cls, source: Source) -> Index:
        ix = cls()
        for e in source.list(CLUSTER_ROLES, None)[0]:
            ix.cluster_roles[e.obj["metadata"]["name"]] = list(e.obj.get("rules") or ())
        for e in source.list(ROLES, None)[0]:
            m = e.obj["metadata"]
            ix.roles[(m.get("namespace") or "", m["name"])] = list(e.obj.get("rules") or ())
        for e in source.list(CLUSTER_ROLE_BINDINGS, None)[0]:
            ref = _ref(e.obj, "")
            for sub in e.obj.get("subjects") or ():
                key = binding_subject_keys(sub, "")
                if key and ref:
                    ix.cluster_bindings.setdefault(key, []).append(ref)
        for e in source.list(ROLE_BINDINGS, None)[0]:
            ns = e.obj["metadata"].get("namespace") or ""
            ref = _ref(e.obj, ns)
            by_subject = ix.bindings.setdefault(ns, {})
            for sub in e.obj.get("subjects") or ():
                key = binding_subject_keys(sub, ns)
                if key and ref:
                    by_subject.setdefault(key, []).append(ref)
        return ix

    def role_rules(self, ref: RoleRef) -> list[Rule] | None:
        kind, ns, name = ref
        if kind == "ClusterRole":
            return self.cluster_roles.get(name)
        return self.roles.get((ns, name))


def _ref(binding: dict[str, Any], ns: str) -> RoleRef | None:
    ref = binding.get("roleRef") or {}
    if ref.get("kind") == "ClusterRole":
        return ("ClusterRole", "", ref.get("name") or "")
    if ref.get("kind") == "Role" and ns:
        return ("Role", ns, ref.get("name") or "")
    return None


def _not_found(ref: RoleRef) -> str:
    kind, _, name = ref
    return f'{kind.lower()}.{GROUP} "{name}" not found'


class RBACAuthorizer:
    def __init__(self, source: Source, decisions: DecisionCache | None = None) -> None:
        self.source = source
        self._subs: list[Any] = []  # one watch per RBAC kind's prefix
        self._index: Index | None = None
        self.decisions = decisions if decisions is not None else DecisionCache()

    def index(self) -> Index:
        """The current index: rebuilt when an RBAC object changed since it was built."""
        stale = self._index is None or not self._subs
        ended = False
        for sub in self._subs:
            q: asyncio.Queue[Any] = sub.queue
            while not q.empty():
                stale = True
                if q.get_nowait() is None:  # the cache ended the watch (fell behind): watch again
                    ended = True
        if ended:
            self.close()
        if stale:
            if not self._subs:
                self._subs = [self.source.subscribe(p, self.source.rev) for p in PREFIXES]
            self._index = Index.build(self.source)
            self.decisions.clear()  # every remembered decision was made on the old index
        assert self._index is not None
        return self._index

    def close(self) -> None:
        for sub in self._subs:
            self.source.unsubscribe(sub)
        self._subs = []

    def refs_for(self, subject: Subject, namespace: str) -> Iterator[RoleRef]:
        ix = self.index()
        keys = subject_keys(subject)
        for k in keys:
            yield from ix.cluster_bindings.get(k, ())
        if namespace:
            in_ns = ix.bindings.get(namespace)
            if in_ns:
                for k in keys:
                    yield from in_ns.get(k, ())

    def authorize(self, a: Attributes) -> tuple[Decision, str]:
        """The decision for `a`, remembered until an RBAC object changes (see decision_cache)."""
        self.index()  # first: a rebuilt index forgets the remembered decisions
        got = self.decisions.get(a)
        if got is None:
            got, name_matters = self._decide(a)
            self.decisions.put(a, got, name_matters)
        return got

    def _decide(self, a: Attributes) -> tuple[tuple[Decision, str], bool]:
        """The uncached walk's answer, and whether another object name could have changed it (a rule with
        resourceNames matched the rest of `a` before any rule allowed it whatever its name)."""
        ix = self.index()
        missing: list[str] = []
        name_matters = False
        for ref in self.refs_for(a.subject, a.namespace):
            rules = ix.role_rules(ref)
            if rules is None:
                missing.append(_not_found(ref))
                continue
            for rule in rules:
                if not rule_matches_but_name(a, rule):
                    continue
                names = rule.get("resourceNames") if a.resource_request else None
                if not names:  # reached whatever the name: the rules before could only allow too
                    return (Decision.ALLOW, ""), False
                name_matters = True
                if a.name in names:
                    return (Decision.ALLOW, ""), True
        return (Decision.NO_OPINION, ("RBAC: " + ", ".join(missing)) if missing else ""), name_matters

    def authorize_uncached(self, a: Attributes) -> tuple[Decision, str]:
        """kube's walk over the subject's bindings, every time (what the cached answers must equal)."""
        ix = self.index()
        missing: list[str] = []
        for ref in self.refs_for(a.subject, a.namespace):
            rules = ix.role_rules(ref)
            if rules is None:
                missing.append(_not_found(ref))
            elif rules_allow(a, rules):
                return Decision.ALLOW, ""
        return Decision.NO_OPINION, ("RBAC: " + ", ".join(missing)) if missing else ""

    def rules_for(self, subject: Subject, namespace: str) -> tuple[list[Rule], list[str]]:
        """Every rule bound to `subject` at the cluster scope and in `namespace` (SelfSubjectRulesReview and
        escalation checks), and the references that could not be resolved."""
        ix = self.index()
        rules: list[Rule] = []
        missing: list[str] = []
        for ref in self.refs_for(subject, namespace):
            got = ix.role_rules(ref)
            if got is None:
                missing.append(_not_found(ref))
            else:
                rules += got
        return rules, missing

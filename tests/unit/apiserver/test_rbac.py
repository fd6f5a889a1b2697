"""The RBAC authorizer over the watch cache: rule matching as kube's RuleAllows, bindings to users, groups
and ServiceAccounts, the bootstrap policy reconciled, escalation refused, impersonation checked."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from multidict import CIMultiDict

from nodeagent.api.resources import builtin
from nodeagent.apiserver.authz import impersonation, policy, reconcile
from nodeagent.apiserver.authz.attributes import Attributes, Subject
from nodeagent.apiserver.authz.chain import Authorizer
from nodeagent.apiserver.authz.escalation import REQUESTER, EscalationCheck
from nodeagent.apiserver.authz.reviews import TokenResult, review
from nodeagent.apiserver.authz.rules import rule_allows, uncovered
from nodeagent.apiserver.cache import WatchCache
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.registry import Registry
from nodeagent.controllers.clusterroleaggregation import aggregated_rules
from nodeagent.store import base as store_base
from nodeagent.store.memory import MemoryStore

NS = builtin("", "v1", "namespaces")
ROLES = builtin("rbac.authorization.k8s.io", "v1", "roles")
RBS = builtin("rbac.authorization.k8s.io", "v1", "rolebindings")
CRS = builtin("rbac.authorization.k8s.io", "v1", "clusterroles")
CRBS = builtin("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
AUTHED = "system:authenticated"
ALICE = Subject("alice", (AUTHED,))


def a(
    subject: Subject, verb: str, resource: str, ns: str = "", name: str = "", group: str = "", sub: str = ""
) -> Attributes:
    return Attributes(subject, verb, True, group, resource, sub, ns, name)


def test_rule_matching_as_kube():
    r = {"verbs": ["get"], "apiGroups": [""], "resources": ["pods", "pods/log"], "resourceNames": ["p"]}
    assert rule_allows(a(ALICE, "get", "pods", "d", "p"), r)
    assert rule_allows(a(ALICE, "get", "pods", "d", "p", sub="log"), r)
    assert not rule_allows(a(ALICE, "get", "pods", "d", "q"), r)
    assert not rule_allows(a(ALICE, "list", "pods", "d"), r)  # resourceNames never grant a list
    assert not rule_allows(a(ALICE, "get", "pods", "d", "p", group="apps"), r)
    star_sub = {"verbs": ["get"], "apiGroups": ["*"], "resources": ["*/scale"]}
    assert rule_allows(a(ALICE, "get", "deployments", "d", "x", "apps", "scale"), star_sub)
    assert not rule_allows(a(ALICE, "get", "deployments", "d", "x", "apps"), star_sub)
    urls = {"verbs": ["get"], "nonResourceURLs": ["/healthz/*", "/api"]}
    assert rule_allows(Attributes(ALICE, "get", False, path="/healthz/etcd"), urls)
    assert rule_allows(Attributes(ALICE, "get", False, path="/api"), urls)
    assert not rule_allows(Attributes(ALICE, "get", False, path="/apis"), urls)
    assert not rule_allows(Attributes(ALICE, "post", False, path="/api"), urls)


def test_coverage_breaks_rules_down():
    owner = [
        {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]},
        {"verbs": ["*"], "apiGroups": ["apps"], "resources": ["*/scale"]},
    ]
    assert not uncovered(
        owner, [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["x"]}]
    )
    assert not uncovered(
        owner, [{"verbs": ["update"], "apiGroups": ["apps"], "resources": ["deployments/scale"]}]
    )
    missing = uncovered(owner, [{"verbs": ["get", "delete"], "apiGroups": [""], "resources": ["pods"]}])
    assert missing == [{"verbs": ["delete"], "apiGroups": [""], "resources": ["pods"]}]


def test_aggregation_unions_selected_roles_in_name_order():
    agg = {
        "metadata": {"name": "view"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x/view": "true"}}]},
    }
    r1 = {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}
    r2 = {"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}
    roles: list[dict[str, Any]] = [
        agg,
        {"metadata": {"name": "b", "labels": {"x/view": "true"}}, "rules": [r2, r1]},
        {"metadata": {"name": "a", "labels": {"x/view": "true"}}, "rules": [r1]},
        {"metadata": {"name": "c"}, "rules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]},
    ]
    assert aggregated_rules(agg, roles) == [r1, r2]


def test_reconcile_adds_what_is_missing_and_respects_autoupdate_false():
    want = policy.cluster_roles()[1]  # cluster-admin
    have = {**want, "rules": [want["rules"][0]], "metadata": {"name": "cluster-admin"}}
    out = reconcile.reconciled(have, want)
    assert out is not None and out["rules"] == want["rules"]
    assert out["metadata"]["annotations"][policy.AUTOUPDATE] == "true"
    off = {**have, "metadata": {"name": "cluster-admin", "annotations": {policy.AUTOUPDATE: "false"}}}
    assert reconcile.reconciled(off, want) is None
    assert reconcile.reconciled(want, want) is None


async def cluster():
    store = MemoryStore()
    reg = Registry(store)
    for ns in ("default", "kube-system", "kube-public", "team"):
        await reg.create(NS, None, {"metadata": {"name": ns}})
    cache = WatchCache(store)
    await cache.start()
    reg.cache = cache
    authz = Authorizer(cache, store.get)
    reg.write_check = EscalationCheck(authz)
    await reconcile.ensure(reg)
    await cache.wait_fresh()
    return reg, cache, authz


async def allowed(authz: Authorizer, cache: WatchCache, attrs: Attributes) -> bool:
    await cache.wait_fresh()
    return (await authz.authorize(attrs))[0]


def binding(
    kind: str, name: str, role_kind: str, role: str, subjects: list[dict], ns: str | None = None
) -> dict:
    meta = {"name": name} | ({"namespace": ns} if ns else {})
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": subjects,
    }


async def test_default_deny_then_a_rolebinding_grants_in_its_namespace_only():
    reg, cache, authz = await cluster()
    sa = Subject(
        "system:serviceaccount:team:app", ("system:serviceaccounts", "system:serviceaccounts:team", AUTHED)
    )
    assert not await allowed(authz, cache, a(sa, "list", "pods", "team"))
    ok, why = await authz.authorize(Attributes(sa, "get", False, path="/apis/apps/v1"))
    assert ok  # system:discovery for every authenticated user
    assert await allowed(
        authz, cache, a(sa, "create", "selfsubjectaccessreviews", group="authorization.k8s.io")
    )
    await reg.create(
        ROLES,
        "team",
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "pods/log"]}],
        },
    )
    await reg.create(
        RBS,
        "team",
        binding(
            "RoleBinding", "read", "Role", "pod-reader", [{"kind": "ServiceAccount", "name": "app"}], "team"
        ),
    )
    assert await allowed(authz, cache, a(sa, "list", "pods", "team"))
    assert await allowed(authz, cache, a(sa, "get", "pods", "team", "x", sub="log"))
    assert not await allowed(authz, cache, a(sa, "list", "pods", "default"))
    assert not await allowed(authz, cache, a(sa, "delete", "pods", "team", "x"))
    authz.rbac.close()
    await cache.stop()


async def test_group_binding_and_a_missing_role_named_in_the_reason():
    reg, cache, authz = await cluster()
    bob = Subject("bob", ("devs", AUTHED))
    await reg.create(
        CRBS,
        None,
        binding(
            "ClusterRoleBinding",
            "devs-view",
            "ClusterRole",
            "nope",
            [{"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"}],
        ),
    )
    await cache.wait_fresh()
    ok, why = await authz.authorize(a(bob, "list", "pods", "default"))
    assert not ok and why == 'RBAC: clusterrole.rbac.authorization.k8s.io "nope" not found'
    await reg.create(
        CRS,
        None,
        {
            "metadata": {"name": "nope"},
            "rules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}],
        },
    )
    assert await allowed(authz, cache, a(bob, "list", "pods", "default"))
    authz.rbac.close()
    await cache.stop()


async def test_escalation_refused_unless_held_or_escalate_or_bind():
    reg, cache, authz = await cluster()
    carol = Subject("carol", (AUTHED,))
    await reg.create(
        ROLES,
        "team",
        {
            "metadata": {"name": "rbac-admin"},
            "rules": [
                # not "*": that includes escalate and bind
                {
                    "verbs": ["create", "get", "update"],
                    "apiGroups": ["rbac.authorization.k8s.io"],
                    "resources": ["roles", "rolebindings"],
                },
                {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]},
            ],
        },
    )
    await reg.create(
        RBS,
        "team",
        binding("RoleBinding", "carol", "Role", "rbac-admin", [{"kind": "User", "name": "carol"}], "team"),
    )
    await cache.wait_fresh()
    token = REQUESTER.set(carol)
    try:
        await reg.create(
            ROLES,
            "team",
            {
                "metadata": {"name": "ok"},
                "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}],
            },
        )
        with pytest.raises(ApiError) as e:
            await reg.create(
                ROLES,
                "team",
                {
                    "metadata": {"name": "too-much"},
                    "rules": [{"verbs": ["get", "delete"], "apiGroups": [""], "resources": ["pods"]}],
                },
            )
        assert e.value.code == 403
        assert e.value.message == (
            'roles.rbac.authorization.k8s.io "too-much" is forbidden: user "carol" '
            '(groups=["system:authenticated"]) '
            "is attempting to grant RBAC permissions not currently held:\n"
            '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}'
        )
        with pytest.raises(ApiError) as e:
            await reg.create(
                RBS,
                "team",
                binding(
                    "RoleBinding",
                    "x",
                    "ClusterRole",
                    "system:aggregate-to-edit",
                    [{"kind": "User", "name": "carol"}],
                    "team",
                ),
            )
        assert e.value.code == 403 and "not currently held" in e.value.message
        await reg.create(
            RBS, "team", binding("RoleBinding", "y", "Role", "ok", [{"kind": "User", "name": "dan"}], "team")
        )
    finally:
        REQUESTER.reset(token)
    assert await reg.store.get(ROLES.key("team", "ok"))
    with pytest.raises(store_base.NotFound):
        await reg.store.get(ROLES.key("team", "too-much"))  # nothing stored for a refused write
    # `bind` on the role lets carol bind what she does not hold
    await reg.create(
        ROLES,
        "team",
        {
            "metadata": {"name": "binder"},
            "rules": [
                {
                    "verbs": ["bind"],
                    "apiGroups": ["rbac.authorization.k8s.io"],
                    "resources": ["clusterroles"],
                    "resourceNames": ["system:aggregate-to-edit"],
                }
            ],
        },
    )
    await reg.create(
        RBS,
        "team",
        binding("RoleBinding", "carol-binder", "Role", "binder", [{"kind": "User", "name": "carol"}], "team"),
    )
    await cache.wait_fresh()
    token = REQUESTER.set(carol)
    try:
        await reg.create(
            RBS,
            "team",
            binding(
                "RoleBinding",
                "x",
                "ClusterRole",
                "system:aggregate-to-edit",
                [{"kind": "User", "name": "erin"}],
                "team",
            ),
        )
    finally:
        REQUESTER.reset(token)
    authz.rbac.close()
    await cache.stop()


async def test_impersonation_checked_with_the_impersonate_verb():
    reg, cache, authz = await cluster()
    frank = Subject("frank", (AUTHED,))
    h = CIMultiDict([("Impersonate-User", "system:serviceaccount:team:app")])
    with pytest.raises(ApiError) as e:
        await impersonation.impersonate(h, frank, authz)
    assert e.value.code == 403
    assert e.value.message == (
        'serviceaccounts "app" is forbidden: User "frank" cannot impersonate resource '
        '"serviceaccounts" in API group "" in the namespace "team"'
    )
    await reg.create(
        RBS,
        "team",
        binding(
            "RoleBinding",
            "frank-edit",
            "ClusterRole",
            "system:aggregate-to-edit",
            [{"kind": "User", "name": "frank"}],
            "team",
        ),
    )
    await cache.wait_fresh()
    who = await impersonation.impersonate(h, frank, authz)
    assert who == Subject(
        "system:serviceaccount:team:app", ("system:serviceaccounts", "system:serviceaccounts:team", AUTHED)
    )
    with pytest.raises(ApiError) as e:
        await impersonation.impersonate(CIMultiDict([("Impersonate-Group", "x")]), frank, authz)
    assert e.value.code == 400
    admin = Subject("admin", ("system:masters", AUTHED))
    two = CIMultiDict(
        [
            ("Impersonate-User", "u"),
            ("Impersonate-Group", "g1"),
            ("Impersonate-Group", "g2"),
            ("Impersonate-Extra-Scopes", "a"),
        ]
    )
    who = await impersonation.impersonate(two, admin, authz)
    assert who.groups == ("g1", "g2", AUTHED) and who.extra == (("scopes", ("a",)),)
    authz.rbac.close()
    await cache.stop()


async def test_reviews_answer_with_the_chain():
    reg, cache, authz = await cluster()
    admin = Subject("admin", ("system:masters", AUTHED))

    async def no_tokens(token: str, aud: list[str]) -> TokenResult:
        return TokenResult(None, [], "invalid bearer token")

    body: dict[str, Any] = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "nobody",
            "resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "default"},
        },
    }
    out = await review("subjectaccessreviews", "", body, admin, authz, no_tokens)
    assert out["status"] == {"allowed": False}
    body["spec"]["groups"] = ["system:masters"]
    out = await review("subjectaccessreviews", "", body, admin, authz, no_tokens)
    assert out["status"]["allowed"] is True
    with pytest.raises(ApiError) as e:
        await review("localsubjectaccessreviews", "team", body, admin, authz, no_tokens)
    assert e.value.code == 400
    rr = await review(
        "selfsubjectrulesreviews",
        "",
        {"spec": {"namespace": "team"}},
        Subject("x", (AUTHED,)),
        authz,
        no_tokens,
    )
    assert {
        "verbs": ["create"],
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
    } in rr["status"]["resourceRules"]
    me = await review(
        "selfsubjectreviews",
        "",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        Subject("x", (AUTHED,), "u1"),
        authz,
        no_tokens,
    )
    assert me["status"]["userInfo"] == {"username": "x", "groups": [AUTHED], "uid": "u1"}
    tr = await review("tokenreviews", "", {"spec": {"token": "t", "audiences": ["vault"]}}, admin, authz,
                      no_tokens)
    assert tr["status"] == {"user": {}, "error": "invalid bearer token"}

    async def vault_only(token: str, aud: list[str]) -> TokenResult:
        return TokenResult(Subject("sa", (AUTHED,)), [a for a in aud if a == "vault"])

    tr = await review("tokenreviews", "", {"spec": {"token": "t", "audiences": ["x", "vault"]}}, admin, authz,
                      vault_only)
    assert tr["status"]["authenticated"] is True and tr["status"]["audiences"] == ["vault"]
    authz.rbac.close()
    await cache.stop()


async def test_index_follows_deletes():
    reg, cache, authz = await cluster()
    gina = Subject("gina", (AUTHED,))
    await reg.create(
        CRBS,
        None,
        binding("ClusterRoleBinding", "gina", "ClusterRole", "view", [{"kind": "User", "name": "gina"}]),
    )
    await reg.create(
        CRS,
        None,
        {"metadata": {"name": "r"}, "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"]}]},
    )
    await reg.create(
        CRBS,
        None,
        binding("ClusterRoleBinding", "gina2", "ClusterRole", "r", [{"kind": "User", "name": "gina"}]),
    )
    assert await allowed(authz, cache, a(gina, "get", "nodes", name="n"))
    await reg.delete(CRBS, None, "gina2")
    await asyncio.sleep(0)
    assert not await allowed(authz, cache, a(gina, "get", "nodes", name="n"))
    authz.rbac.close()
    await cache.stop()


def test_every_controller_writes_under_an_account_the_bootstrap_policy_binds() -> None:
    """A controller whose ServiceAccount has no role gets 403 on every write (the LoadBalancer allocator's
    service-controller had none: Services stayed pending)."""
    from nodeagent.apiserver.authz import policy as bootstrap
    from nodeagent.controllers.manager import CONTROLLERS

    roles = {r["metadata"]["name"] for r in bootstrap.controller_roles()}
    bound = {(b["roleRef"]["name"], s["name"]) for b in bootstrap.controller_role_bindings()
             for s in b.get("subjects") or []}
    # the token controller writes with the manager's own credential, as kube's does (rootClientBuilder)
    assert [c.__name__ for c in CONTROLLERS if not c.service_account] == ["ServiceAccountTokenController"]
    accounts = {str(c.service_account) for c in CONTROLLERS if c.service_account}
    missing = [a for a in sorted(accounts) if bootstrap.CONTROLLER_PREFIX + a not in roles
               or (bootstrap.CONTROLLER_PREFIX + a, a) not in bound]
    assert missing == []


async def test_the_add_ons_accounts_do_their_work_and_no_more() -> None:
    """CoreDNS, the NetworkPolicy agent and the ingress controller run under their ServiceAccounts (issue 21
    item 4): what each component reads and writes is allowed; writes beyond it are not."""
    from nodeagent.api.sa_token import groups, username

    reg, cache, authz = await cluster()

    def sa(ns_name: tuple[str, str]) -> Subject:
        return Subject(username(*ns_name), (*groups(ns_name[0]), AUTHED))

    dns, netpol, ingress = sa(policy.COREDNS), sa(policy.NETPOL), sa(policy.INGRESS)
    disc = "discovery.k8s.io"
    for verb in ("list", "watch"):
        for res, group in (("services", ""), ("endpointslices", disc), ("endpoints", ""), ("pods", ""),
                           ("namespaces", "")):
            assert await allowed(authz, cache, a(dns, verb, res, group=group))
        for res, group in (("networkpolicies", "networking.k8s.io"), ("pods", ""), ("namespaces", "")):
            assert await allowed(authz, cache, a(netpol, verb, res, group=group))
        for res, group in (("ingresses", "networking.k8s.io"), ("ingressclasses", "networking.k8s.io"),
                           ("services", ""), ("endpointslices", disc), ("secrets", ""), ("nodes", "")):
            assert await allowed(authz, cache, a(ingress, verb, res, group=group))
    # DNS only reads: the kube-dns Service and its slice are the installer's
    for verb in ("create", "update", "delete"):
        assert not await allowed(authz, cache, a(dns, verb, "services", "kube-system", "kube-dns"))
        assert not await allowed(authz, cache, a(dns, verb, "endpointslices", "kube-system", group=disc))
        assert not await allowed(authz, cache, a(netpol, verb, "networkpolicies", "team",
                                                 group="networking.k8s.io"))
    assert not await allowed(authz, cache, a(dns, "get", "secrets", "team"))
    assert not await allowed(authz, cache, a(netpol, "list", "secrets"))
    # the ingress controller: statuses, its default class, events, its leader Lease in kube-system only
    assert await allowed(authz, cache, a(ingress, "patch", "ingresses", "team", "web", "networking.k8s.io",
                                         "status"))
    assert not await allowed(authz, cache, a(ingress, "patch", "ingresses", "team", "web",
                                             "networking.k8s.io"))
    assert await allowed(authz, cache, a(ingress, "create", "ingressclasses", group="networking.k8s.io"))
    assert await allowed(authz, cache, a(ingress, "create", "events", "team"))
    lease = ("coordination.k8s.io", "leases")
    assert await allowed(authz, cache, a(ingress, "update", lease[1], "kube-system", policy.INGRESS_LEASE,
                                         lease[0]))
    assert not await allowed(authz, cache, a(ingress, "update", lease[1], "kube-system", "kube-scheduler",
                                             lease[0]))
    assert not await allowed(authz, cache, a(ingress, "update", lease[1], "team", policy.INGRESS_LEASE,
                                             lease[0]))
    assert not await allowed(authz, cache, a(ingress, "create", "secrets", "team"))
    gw = "gateway.networking.k8s.io"
    assert await allowed(authz, cache, a(ingress, "patch", "httproutes", "team", "r", gw, "status"))
    assert not await allowed(authz, cache, a(ingress, "delete", "httproutes", "team", "r", gw))
    await cache.stop()


def test_the_ingress_lease_is_the_one_the_controller_elects_with() -> None:
    from nodeagent.ingress.service import LEASE_NAME

    assert policy.INGRESS_LEASE == LEASE_NAME

"""The RBAC decision cache answers as the uncached walk does, for every request and across every change of
the RBAC objects (roles and bindings written, changed and deleted, rules with resourceNames), and stays
within its bound."""

from __future__ import annotations

import contextlib
import random
from typing import Any

from nodeagent.apiserver.authz.attributes import Attributes, Decision, Subject
from nodeagent.apiserver.authz.decision_cache import DecisionCache
from nodeagent.apiserver.errors import ApiError
from tests.unit.apiserver.test_rbac import AUTHED, CRBS, CRS, RBS, ROLES, binding, cluster

USERS = [Subject(f"u{i}", (f"g{i % 2}", AUTHED)) for i in range(4)] + [
    Subject("system:serviceaccount:team:app", ("system:serviceaccounts", AUTHED))
]
VERBS = ["get", "list", "create", "update", "delete"]
RESOURCES = [("", "pods", ""), ("", "pods", "binding"), ("", "pods", "status"), ("", "nodes", ""),
             ("apps", "deployments", ""), ("apps", "deployments", "scale"), ("", "configmaps", "")]
NAMESPACES = ["", "default", "team"]
NAMES = ["", "n0", "n1", "n2"]


def random_rule(rng: random.Random) -> dict[str, Any]:
    groups = sorted({g for g, _, _ in rng.sample(RESOURCES, 2)}) if rng.random() < 0.8 else ["*"]
    resources = [r + (f"/{s}" if s else "") for _, r, s in rng.sample(RESOURCES, 3)]
    if rng.random() < 0.15:
        resources.append(rng.choice(["*", "*/scale", "*/status"]))
    rule: dict[str, Any] = {"verbs": rng.sample(VERBS, rng.randint(1, 3)) if rng.random() < 0.9 else ["*"],
                            "apiGroups": groups, "resources": resources}
    if rng.random() < 0.5:
        rule["resourceNames"] = rng.sample(NAMES[1:], rng.randint(1, 2))
    return rule


def random_subject(rng: random.Random) -> dict[str, Any]:
    pick = rng.random()
    if pick < 0.5:
        return {"kind": "User", "name": rng.choice(USERS[:4]).name}
    if pick < 0.8:
        return {"kind": "Group", "name": rng.choice(["g0", "g1"])}
    return {"kind": "ServiceAccount", "name": "app", "namespace": "team"}


def random_request(rng: random.Random) -> Attributes:
    if rng.random() < 0.05:
        return Attributes(rng.choice(USERS), "get", False, path=rng.choice(["/healthz", "/api", "/version"]))
    group, res, sub = rng.choice(RESOURCES)
    return Attributes(rng.choice(USERS), rng.choice(VERBS), True, group, res, sub, rng.choice(NAMESPACES),
                      rng.choice(NAMES))


async def change(reg: Any, rng: random.Random) -> None:
    """One random write to the RBAC objects (the names repeat, so later steps replace and delete)."""
    kind = rng.choice(["role", "clusterrole", "rolebinding", "clusterrolebinding", "delete"])
    n = f"r{rng.randint(0, 3)}"
    if kind == "delete":
        res, ns = rng.choice([(ROLES, "team"), (CRS, None), (RBS, "team"), (CRBS, None)])
        with contextlib.suppress(ApiError):  # not there: this step changes nothing
            await reg.delete(res, ns, n)
        return
    if kind in ("role", "clusterrole"):
        res, ns = (ROLES, "team") if kind == "role" else (CRS, None)
        rules = [random_rule(rng) for _ in range(rng.randint(1, 3))]
        obj: dict[str, Any] = {"metadata": {"name": n}, "rules": rules}
    else:
        ns = "team" if kind == "rolebinding" else None
        res = RBS if ns else CRBS
        role_kind = "Role" if ns and rng.random() < 0.5 else "ClusterRole"
        obj = binding("RoleBinding" if ns else "ClusterRoleBinding", n, role_kind, f"r{rng.randint(0, 3)}",
                      [random_subject(rng) for _ in range(rng.randint(1, 2))], ns)
    try:
        cur = await reg.get(res, ns, n)
    except ApiError:  # not there yet
        await reg.create(res, ns, obj)
        return
    if "roleRef" in obj and cur["roleRef"] != obj["roleRef"]:
        await reg.delete(res, ns, n)  # roleRef is immutable
        await reg.create(res, ns, obj)
        return
    obj["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
    await reg.update(res, ns, n, obj)


async def test_cached_decisions_equal_the_walk_across_rbac_changes() -> None:
    reg, cache, authz = await cluster()
    rbac = authz.rbac
    rng = random.Random(26)
    pool = [random_request(rng) for _ in range(400)]
    flipped = hits = 0
    previous: dict[Attributes, tuple[Decision, str]] = {}
    for step in range(40):
        await change(reg, rng)
        await cache.wait_fresh()
        for _ in range(600):
            a = rng.choice(pool)
            was_cached = rbac.decisions.get(a) is not None
            got = rbac.authorize(a)
            want = rbac.authorize_uncached(a)
            assert got == want, (step, a)
            hits += was_cached
            if a in previous and previous[a] != want:
                flipped += 1
            previous[a] = want
    # the test means something: answers were served from the cache, and RBAC changes flipped some of them
    assert hits > 10_000 and flipped > 50
    assert rbac.decisions.generation >= 20
    rbac.close()
    await cache.stop()


async def test_the_bind_of_every_pod_is_one_entry_and_a_named_rule_keys_by_name() -> None:
    reg, cache, authz = await cluster()
    rbac = authz.rbac
    rbac.decisions.clear()
    sched = Subject("system:kube-scheduler", (AUTHED,))
    for i in range(50):
        ok = rbac.authorize(Attributes(sched, "create", True, "", "pods", "binding", "default", f"p{i}"))
        assert ok[0] is Decision.ALLOW
    assert len(rbac.decisions) == 1
    await reg.create(CRS, None, {"metadata": {"name": "one-cm"}, "rules": [
        {"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"]}]})
    await reg.create(CRBS, None, binding("ClusterRoleBinding", "one-cm", "ClusterRole", "one-cm",
                                         [{"kind": "User", "name": "dora"}]))
    await cache.wait_fresh()
    dora = Subject("dora", (AUTHED,))
    verdicts = [rbac.authorize(Attributes(dora, "get", True, "", "configmaps", "", "default", n))[0]
                for n in ("a", "b", "a", "b")]
    assert verdicts == [Decision.ALLOW, Decision.NO_OPINION] * 2
    rbac.close()
    await cache.stop()


def test_the_cache_is_bounded_oldest_first() -> None:
    c = DecisionCache(size=3)
    reqs = [Attributes(Subject(f"u{i}"), "get", True, "", "pods") for i in range(5)]
    for a in reqs:
        c.put(a, (Decision.ALLOW, ""), False)
    assert len(c) == 3
    assert c.get(reqs[0]) is None and c.get(reqs[1]) is None and c.get(reqs[4]) == (Decision.ALLOW, "")

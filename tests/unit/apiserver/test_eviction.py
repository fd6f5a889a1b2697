"""pods/eviction over the in-memory registry: budgets honoured as kube-apiserver's EvictionREST does."""

import pytest

from nodeagent.api.resources import builtin
from nodeagent.api.status import status_body
from nodeagent.apiserver import eviction
from nodeagent.apiserver.codec import dumps
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.registry import Registry
from nodeagent.store.memory import MemoryStore

NS, PODS, PDBS = builtin("", "v1", "namespaces"), builtin("", "v1", "pods"), eviction.PDBS


@pytest.fixture
async def reg():
    r = Registry(MemoryStore())
    await r.create(NS, None, {"metadata": {"name": "d"}})
    yield r
    await r.close()


async def running_pod(reg, name, ready=True):
    await reg.create(PODS, "d", {"metadata": {"name": name, "labels": {"app": "a"}},
                                 "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    p = await reg.get(PODS, "d", name)
    p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}
    await reg.update(PODS, "d", name, p, "status")


async def budget(reg, allowed, current=2, desired=1, observed=1):
    b = await reg.create(PDBS, "d", {"metadata": {"name": "b"},
                                     "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "a"}}}})
    b["status"] = {"observedGeneration": observed, "disruptionsAllowed": allowed, "currentHealthy": current,
                   "desiredHealthy": desired, "expectedPods": 2, "conditions": []}
    await reg.update(PDBS, "d", "b", b, "status")


def body(name, **opts):
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "d"},
            **({"deleteOptions": opts} if opts else {})}


async def gone(reg, name):
    try:
        p = await reg.get(PODS, "d", name)
    except ApiError as e:
        return e.code == 404
    return bool(p["metadata"].get("deletionTimestamp"))


async def test_blocked_by_exhausted_budget_with_kube_apiservers_answer(reg):
    await running_pod(reg, "p")
    await budget(reg, allowed=0, current=1, desired=1)
    with pytest.raises(ApiError) as e:
        await eviction.evict(reg, PODS, "d", "p", body("p"), False)
    assert dumps(e.value.status()) == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Cannot evict pod as '
        b'it would violate the pod\'s disruption budget.","reason":"TooManyRequests","details":{"causes":'
        b'[{"reason":"DisruptionBudget","message":"The disruption budget b needs 1 healthy pods and has 1 '
        b'currently"}]},"code":429}')
    assert not await gone(reg, "p")


async def test_allowed_decrements_records_and_marks_the_pod(reg):
    await running_pod(reg, "p")
    await budget(reg, allowed=1)
    out, code = await eviction.evict(reg, PODS, "d", "p", body("p"), False)
    assert (out, code) == (status_body("Success", code=201), 201)
    st = (await reg.get(PDBS, "d", "b"))["status"]
    assert st["disruptionsAllowed"] == 0 and list(st["disruptedPods"]) == ["p"]
    assert st["conditions"][0]["reason"] == "InsufficientPods"
    assert await gone(reg, "p")


async def test_stale_budget_status_asks_to_retry(reg):
    await running_pod(reg, "p")
    await budget(reg, allowed=1, observed=0)
    with pytest.raises(ApiError) as e:
        await eviction.evict(reg, PODS, "d", "p", body("p"), False)
    details = e.value.details or {}
    assert e.value.code == 429 and details["retryAfterSeconds"] == 10
    assert "still being processed" in details["causes"][0]["message"]


async def test_unready_pod_goes_while_the_budget_holds_without_it(reg):
    await running_pod(reg, "p", ready=False)
    await budget(reg, allowed=0, current=1, desired=1)
    await eviction.evict(reg, PODS, "d", "p", body("p"), False)
    assert await gone(reg, "p")


async def test_pending_pod_and_dry_run_and_bad_bodies(reg):
    await reg.create(PODS, "d", {"metadata": {"name": "pending", "labels": {"app": "a"}},
                                 "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    await budget(reg, allowed=0)
    await eviction.evict(reg, PODS, "d", "pending", body("pending"), False)  # no budget check
    assert await gone(reg, "pending")
    await running_pod(reg, "p")
    with pytest.raises(ApiError) as e:
        await eviction.evict(reg, PODS, "d", "p", body("other"), False)
    assert e.value.code == 400 and e.value.message == "name in URL does not match name in Eviction object"
    b = await reg.get(PDBS, "d", "b")
    b["status"]["disruptionsAllowed"] = 1
    await reg.update(PDBS, "d", "b", b, "status")
    await eviction.evict(reg, PODS, "d", "p", body("p", dryRun=["All"]), False)
    assert not await gone(reg, "p")
    assert (await reg.get(PDBS, "d", "b"))["status"]["disruptionsAllowed"] == 1


async def test_two_budgets_answer_500(reg):
    await running_pod(reg, "p")
    await budget(reg, allowed=1)
    await reg.create(PDBS, "d", {"metadata": {"name": "b2"},
                                 "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "a"}}}})
    out, code = await eviction.evict(reg, PODS, "d", "p", body("p"), False)
    assert code == 500 and out["status"] == "Failure"
    assert "more than one PodDisruptionBudget" in out["message"]


async def test_evicted_pod_on_a_node_carries_disruption_target(reg):
    spec = {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}
    await reg.create(PODS, "d", {"metadata": {"name": "p", "labels": {"app": "a"}}, "spec": spec})
    p = await reg.get(PODS, "d", "p")
    p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    await reg.update(PODS, "d", "p", p, "status")
    await budget(reg, allowed=1)
    await eviction.evict(reg, PODS, "d", "p", body("p"), False)
    p = await reg.get(PODS, "d", "p")  # graceful: the kubelet finishes it
    assert p["metadata"]["deletionTimestamp"]
    cond = next(c for c in p["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert (cond["status"], cond["reason"], cond["message"]) == ("True", "EvictionByEvictionAPI",
                                                                 "Eviction API: evicting")

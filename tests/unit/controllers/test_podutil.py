import asyncio
import datetime as dt

from nodeagent.api.selectors import from_label_selector
from nodeagent.controllers import podutil

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def pod(name, node="", phase="Running", ready=False, restarts=0, created="2026-01-01T10:00:00Z",
        ready_at="2026-01-01T11:00:00Z", cost=None, owner=None, labels=None):
    p = {"metadata": {"name": name, "creationTimestamp": created, "labels": labels or {"app": "x"}},
         "spec": {"nodeName": node} if node else {},
         "status": {"phase": phase, "containerStatuses": [{"restartCount": restarts}],
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                    "lastTransitionTime": ready_at}]}}
    if cost is not None:
        p["metadata"]["annotations"] = {podutil.POD_DELETION_COST: str(cost)}
    if owner:
        p["metadata"]["ownerReferences"] = [{"uid": owner, "controller": True, "kind": "ReplicaSet"}]
    return p


def names(pods):
    return [p["metadata"]["name"] for p in pods]


def test_deletion_order_follows_kubernetes_ranking():
    pods = [
        pod("ready-old", node="n1", ready=True, ready_at="2026-01-01T09:00:00Z"),
        pod("unassigned", phase="Pending"),
        pod("pending", node="n2", phase="Pending"),
        pod("not-ready", node="n3"),
        pod("ready-recent", node="n4", ready=True, ready_at="2026-01-01T11:30:00Z"),
    ]
    assert names(podutil.pods_to_delete(pods, 5)) == [
        "unassigned", "pending", "not-ready", "ready-recent", "ready-old"]


def test_deletion_cost_restarts_and_colocation():
    a = pod("cheap", node="n1", ready=True, cost=-10)
    b = pod("dear", node="n2", ready=True, cost=100)
    assert names(podutil.pods_to_delete([b, a], 1)) == ["cheap"]
    crashy = pod("crashy", node="n1", ready=True, restarts=5, ready_at="2026-01-01T11:00:00Z")
    calm = pod("calm", node="n2", ready=True, restarts=0, ready_at="2026-01-01T11:00:00Z")
    assert names(podutil.pods_to_delete([calm, crashy], 1)) == ["crashy"]
    doubled = [pod("d1", node="busy", ready=True), pod("d2", node="busy", ready=True),
               pod("alone", node="quiet", ready=True)]
    assert podutil.pods_to_delete(doubled, 1)[0]["spec"]["nodeName"] == "busy"


def test_availability_needs_min_ready_seconds():
    p = pod("p", ready=True, ready_at="2026-01-01T11:59:30Z")
    assert podutil.is_pod_available(p, 0, NOW)
    assert podutil.is_pod_available(p, 30, NOW)
    assert not podutil.is_pod_available(p, 31, NOW)


def test_claim_adopt_release_ignore():
    owner = {"metadata": {"uid": "u1", "name": "rs"}}
    sel = from_label_selector({"matchLabels": {"app": "x"}})
    assert podutil.claimable(pod("a", owner="u1"), owner, sel) == "own"
    assert podutil.claimable(pod("b"), owner, sel) == "adopt"
    assert podutil.claimable(pod("c", owner="u2"), owner, sel) == "ignore"
    assert podutil.claimable(pod("d", owner="u1", labels={"app": "y"}), owner, sel) == "release"
    assert podutil.claimable(pod("e", labels={"app": "y"}), owner, sel) == "ignore"


def test_pod_from_template_sets_owner_and_generate_name():
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-abc", "uid": "u"}}
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    p = podutil.pod_from_template(template, owner, "ns", "web-abc")
    assert p["metadata"]["generateName"] == "web-abc-"
    assert p["metadata"]["ownerReferences"][0]["controller"] is True
    assert p["spec"] == template["spec"] and p["spec"] is not template["spec"]


async def test_slow_start_batches_stop_at_first_failure():
    calls = []

    async def ok():
        calls.append(1)

    assert await podutil.slow_start_batch(10, 1, ok) == 10
    assert len(calls) == 10
    n = [0]

    async def fails_after_3():
        n[0] += 1
        await asyncio.sleep(0)
        if n[0] > 3:
            raise RuntimeError("quota")

    # batches 1, 2 succeed (3 calls), batch of 4 fails: 7 calls made, 3 succeeded
    assert await podutil.slow_start_batch(100, 1, fails_after_3) == 3
    assert n[0] == 7

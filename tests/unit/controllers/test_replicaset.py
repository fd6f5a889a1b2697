import datetime as dt

from nodeagent.controllers import replicaset
from tests.unit.controllers.test_podutil import pod

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def rs(n, uid="u1"):
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "rs", "uid": uid, "generation": 3},
            "spec": {"replicas": n, "selector": {"matchLabels": {"app": "x"}},
                     "template": {"metadata": {"labels": {"app": "x"}}}}}


def test_creates_missing_and_adopts_orphans():
    plan = replicaset.plan(rs(3), [pod("mine", owner="u1"), pod("orphan"), pod("other", owner="u9")])
    assert plan.create == 1
    assert [p["metadata"]["name"] for p in plan.adopt] == ["orphan"]
    assert plan.delete == []


def test_deletes_least_valuable_and_caps_burst():
    pods = [pod("ready", node="n", ready=True, owner="u1"), pod("pending", phase="Pending", owner="u1"),
            pod("done", phase="Succeeded", owner="u1")]
    plan = replicaset.plan(rs(1), pods)
    assert [p["metadata"]["name"] for p in plan.delete] == ["pending"]
    assert [p["metadata"]["name"] for p in plan.owned] == ["ready"]
    assert replicaset.plan(rs(1000), [], burst=500).create == 500


def test_releases_pods_whose_labels_no_longer_match():
    plan = replicaset.plan(rs(1), [pod("relabelled", owner="u1", labels={"app": "y"})])
    assert [p["metadata"]["name"] for p in plan.release] == ["relabelled"]
    assert plan.create == 1


def test_status_counts():
    pods = [pod("a", ready=True, ready_at="2026-01-01T11:00:00Z"), pod("b"),
            pod("c", ready=True, ready_at="2026-01-01T11:59:59Z", labels={"other": "1"})]
    r = rs(3)
    r["spec"]["minReadySeconds"] = 10
    st = replicaset.status(r, pods, NOW)
    assert st == {"replicas": 3, "fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 1,
                  "observedGeneration": 3}
    failed = replicaset.status(r, pods, NOW, failure="exceeded quota")
    assert failed["conditions"][0]["type"] == "ReplicaFailure"

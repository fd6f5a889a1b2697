"""DaemonSet decisions: eligibility, pinning, creates/deletes, rolling update budget."""

from __future__ import annotations

import datetime as dt

from nodeagent.api import taints as t
from nodeagent.controllers import daemonset as d

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def ds(image="a:1", max_unavailable=1, **tspec):
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "ds", "namespace": "ns", "uid": "u1", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "x"}},
                     "updateStrategy": {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": max_unavailable}},
                     "template": {"metadata": {"labels": {"app": "x"}},
                                  "spec": {"containers": [{"name": "c", "image": image}], **tspec}}}}


def node(name, labels=None, taints=None):
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []}}


def pod(name, node_name, rev, ready=True, ts="2026-01-01T00:00:00Z"):
    p = {"metadata": {"name": name, "labels": {d.HASH_LABEL: rev}, "creationTimestamp": ts},
         "spec": {"nodeName": node_name}, "status": {"phase": "Running"}}
    if ready:
        p["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return p


def test_eligibility_by_selector_affinity_and_taints():
    x = ds(nodeSelector={"disk": "ssd"})
    assert d.node_should_run(x, node("a", {"disk": "ssd"})) == (True, True)
    assert d.node_should_run(x, node("b")) == (False, False)
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]}}}
    assert d.node_should_run(ds(affinity=aff), node("a", {"zone": "z1"}))[0]
    assert not d.node_should_run(ds(affinity=aff), node("a", {"zone": "z2"}))[0]
    # default tolerations: not-ready/unreachable NoExecute, network-unavailable and unschedulable NoSchedule
    for key, eff in ((t.UNREACHABLE, "NoExecute"), (t.NOT_READY, "NoExecute"),
                     (t.NETWORK_UNAVAILABLE, "NoSchedule"),
                     (t.UNSCHEDULABLE, "NoSchedule"), (t.DISK_PRESSURE, "NoSchedule")):
        assert d.node_should_run(ds(), node("a", taints=[{"key": key, "effect": eff}])) == (True, True)
    assert d.node_should_run(ds(), node("a", taints=[{"key": "gpu", "effect": "NoSchedule"}])) == (
        False, True)
    assert d.node_should_run(ds(), node("a", taints=[{"key": "gpu", "effect": "NoExecute"}])) == (
        False, False)
    tol = [{"key": "gpu", "operator": "Exists"}]
    tainted = node("a", taints=[{"key": "gpu", "effect": "NoExecute"}])
    assert d.node_should_run(ds(tolerations=tol), tainted)[0]


def test_pod_is_pinned_with_match_fields_and_default_tolerations():
    p = d.pod_for_node(ds(), "node-7", "rev1")
    required = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms = required["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-7"]}]}]
    assert "nodeName" not in p["spec"] and d.pod_node(p) == "node-7"
    keys = {(x["key"], x["effect"]) for x in p["spec"]["tolerations"]}
    assert (t.UNREACHABLE, "NoExecute") in keys and (t.NETWORK_UNAVAILABLE, "NoSchedule") in keys
    assert p["metadata"]["labels"] == {"app": "x", d.HASH_LABEL: "rev1", d.GENERATION_LABEL: "1"}
    assert p["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"


def test_plan_creates_missing_deletes_duplicates_and_misscheduled():
    x = ds(nodeSelector={"run": "yes"})
    rev = d.revision_hash(x)
    nodes = [node("a", {"run": "yes"}), node("b", {"run": "yes"}), node("c")]
    pods = [pod("p1", "a", rev, ts="2026-01-01T00:00:00Z"), pod("p2", "a", rev, ts="2026-01-01T00:00:05Z"),
            pod("p3", "c", rev), pod("p4", "gone-node", rev)]
    p = d.plan(x, nodes, pods, NOW)
    assert p.create == ["b"]
    assert sorted(v["metadata"]["name"] for v in p.delete) == ["p2", "p3", "p4"]
    assert p.status["desiredNumberScheduled"] == 2 and p.status["currentNumberScheduled"] == 1
    assert p.status["numberMisscheduled"] == 1


def test_rolling_update_respects_max_unavailable():
    old, new = ds("a:1"), ds("a:2")
    old_rev = d.revision_hash(old)
    assert old_rev != d.revision_hash(new)
    nodes = [node(n) for n in "abcd"]
    pods = [pod(f"p{n}", n, old_rev) for n in "abcd"]
    p = d.plan(new, nodes, pods, NOW)
    assert not p.create and len(p.delete) == 1  # maxUnavailable 1
    p = d.plan(ds("a:2", max_unavailable="50%"), nodes, pods, NOW)
    assert len(p.delete) == 2
    # one node already unavailable (its pod not ready): it goes first and uses the budget
    pods[2] = pod("pc", "c", old_rev, ready=False)
    p = d.plan(new, nodes, pods, NOW)
    assert [v["metadata"]["name"] for v in p.delete] == ["pc"]
    # all updated: nothing to do, status says so
    cur = d.revision_hash(new)
    p = d.plan(new, nodes, [pod(f"p{n}", n, cur) for n in "abcd"], NOW)
    assert not p.create and not p.delete
    assert p.status["updatedNumberScheduled"] == 4 and p.status["numberAvailable"] == 4

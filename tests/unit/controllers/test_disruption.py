"""The disruption controller's arithmetic against pkg/controller/disruption's rules."""

import datetime as dt

import pytest

from nodeagent.api import pdb as pdbutil
from nodeagent.controllers import disruption as d

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


def pod(name, ready=True, owner="rs-uid", labels=None, deleting=False):
    meta = {"name": name, "namespace": "ns", "labels": labels or {"app": "a"}}
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "uid": owner, "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T11:59:00Z"
    return {"metadata": meta, "status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}


def pdb(**spec):
    return {"metadata": {"name": "b", "namespace": "ns", "generation": 3},
            "spec": {"selector": {"matchLabels": {"app": "a"}}, **spec}}


def scale_of(n):
    return lambda p: ("rs-uid", n) if (p["metadata"].get("ownerReferences")) else None


def test_integer_min_available_counts_pods():
    pods = [pod("a"), pod("b"), pod("c", ready=False)]
    c = d.compute(pdb(minAvailable=1), pods, scale_of(5), NOW)
    assert (c.expected, c.desired, c.current) == (3, 1, 2)
    st = d.new_status(pdb(minAvailable=1), c)
    pdbutil.update_disruption_allowed_condition(st, "t")
    assert st["disruptionsAllowed"] == 1 and st["observedGeneration"] == 3
    assert st["conditions"] == [{"type": "DisruptionAllowed", "status": "True", "observedGeneration": 3,
                                 "lastTransitionTime": "t", "reason": "SufficientPods", "message": ""}]
    assert pdbutil.conditions_up_to_date(st)


@pytest.mark.parametrize("spec,expected,desired", [
    ({"maxUnavailable": 1}, 4, 3), ({"maxUnavailable": "50%"}, 4, 2), ({"minAvailable": "50%"}, 4, 2),
    ({"maxUnavailable": "10%"}, 4, 3),  # percentages round up: 10% of 4 is one pod
])
def test_percentages_and_max_unavailable_use_the_controllers_scale(spec, expected, desired):
    c = d.compute(pdb(**spec), [pod("a"), pod("b")], scale_of(4), NOW)
    assert (c.expected, c.desired) == (expected, desired)


def test_unmanaged_pods_are_left_out_of_the_scale():
    c = d.compute(pdb(maxUnavailable=0), [pod("a"), pod("x", owner=None)], scale_of(1), NOW)
    assert c.unmanaged == ["x"] and c.expected == 1


def test_missing_controller_fails_safe():
    def missing(p):
        raise LookupError("found no controllers for pod 'a'")
    with pytest.raises(d.SyncError):
        d.compute(pdb(maxUnavailable=1), [pod("a")], missing, NOW)
    st = d.failsafe_status({**pdb(), "status": {"disruptionsAllowed": 2}}, "x")
    assert st["disruptionsAllowed"] == 0


def test_no_disruption_while_nothing_is_expected_or_budget_met_exactly():
    assert d.new_status(pdb(), d.Computed(0, 0, 0, {}, [], None))["disruptionsAllowed"] == 0
    assert d.new_status(pdb(), d.Computed(2, 2, 2, {}, [], None))["disruptionsAllowed"] == 0
    st = d.new_status(pdb(), d.Computed(2, 2, 2, {}, [], None))
    pdbutil.update_disruption_allowed_condition(st, "t")
    assert st["conditions"][0]["reason"] == "InsufficientPods"


def test_disrupted_pods_are_not_healthy_until_they_expire():
    recent = (NOW - dt.timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    old = (NOW - dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    budget = {**pdb(minAvailable=1), "status": {"disruptedPods": {"a": recent, "b": old, "gone": recent}}}
    c = d.compute(budget, [pod("a"), pod("b"), pod("c", deleting=True)], scale_of(3), NOW)
    assert c.disrupted == {"a": recent}  # b expired, gone no longer exists
    assert c.current == 1  # b only: a was evicted a moment ago, c is deleting
    assert c.recheck == NOW + dt.timedelta(seconds=90)


def test_missing_selector_selects_nothing():
    assert d.pods_for({"metadata": {"namespace": "ns"}, "spec": {}}, [pod("a")]) == []

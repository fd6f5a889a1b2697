from typing import Any

from nodeagent.api import taints as t
from nodeagent.controllers import nodelifecycle as nl
from nodeagent.testing.clock import FakeClock


def node(name, ready="True", zone="a", taints=None, unschedulable=False, pressure=None):
    conds = [{"type": "Ready", "status": ready, "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]
    if pressure:
        conds.append({"type": pressure, "status": "True"})
    n = {"metadata": {"name": name, "labels": {nl.ZONE_LABEL: zone}}, "spec": {},
         "status": {"conditions": conds}}
    if taints:
        n["spec"]["taints"] = taints
    if unschedulable:
        n["spec"]["unschedulable"] = True
    return n


def test_zone_states():
    assert nl.zone_state(["True"] * 10, 0.55) == nl.NORMAL
    assert nl.zone_state(["False"] * 2 + ["True"], 0.55) == nl.NORMAL  # needs more than 2 not ready
    assert nl.zone_state(["False"] * 3 + ["True"] * 2, 0.55) == nl.PARTIAL
    assert nl.zone_state(["Unknown"] * 4, 0.55) == nl.FULL


def test_rates_follow_zone_state_and_cluster_size():
    s = nl.Settings()
    small = [node(f"a{i}", "False" if i < 3 else "True", "a") for i in range(5)] + [node("b0", zone="b")]
    states, rates = nl.zone_rates(small, s)
    za, zb = nl.zone_key(small[0]), nl.zone_key(small[-1])
    assert states[za] == nl.PARTIAL and rates[za] == 0.0  # small partially disrupted zone: stop
    assert rates[zb] == 0.1
    large = [node(f"a{i}", "False" if i < 40 else "True", "a") for i in range(60)]
    states, rates = nl.zone_rates(large, s)
    assert rates[za] == 0.01  # large zone: secondary rate
    all_down = [node("x", "Unknown", "a"), node("y", "Unknown", "b")]
    assert set(nl.zone_rates(all_down, s)[1].values()) == {0.0}  # every zone fully disrupted: no evictions
    one_down = [node("x", "Unknown", "a"), node("y", "True", "b")]
    assert nl.zone_rates(one_down, s)[1][nl.zone_key(one_down[0])] == 0.1  # full zone among healthy: normal


def test_heartbeat_tracker_uses_own_clock():
    clock = FakeClock(100.0)
    hb = nl.HeartbeatTracker(clock=clock)
    hb.observe("n", "lease:1")
    clock.t = 130
    hb.observe("n", "lease:1")
    assert hb.silent_for("n") == 30
    hb.observe("n", "lease:2")
    assert hb.silent_for("n") == 0


def test_unknown_conditions_marks_once():
    n = node("n")
    conds = nl.unknown_conditions(n, "2026-01-01T00:01:00Z")
    assert conds is not None
    ready = next(c for c in conds if c["type"] == "Ready")
    assert ready["status"] == "Unknown" and ready["reason"] == "NodeStatusUnknown"
    n["status"]["conditions"] = conds
    assert nl.unknown_conditions(n, "2026-01-01T00:02:00Z") is None


def test_taints_added_under_rate_limit_and_removed_on_recovery():
    n = node("n", ready="Unknown")
    no_token = nl.reconcile_taints(n, "T", allow_no_execute=False)
    assert no_token is not None
    assert {(x["key"], x["effect"]) for x in no_token} == {(t.UNREACHABLE, "NoSchedule")}
    with_token = nl.reconcile_taints(n, "T", allow_no_execute=True)
    assert with_token is not None
    assert {(x["key"], x["effect"]) for x in with_token} == {(t.UNREACHABLE, "NoSchedule"),
                                                            (t.UNREACHABLE, "NoExecute")}
    n["spec"]["taints"] = with_token + [{"key": "user", "effect": "NoSchedule"}]
    assert nl.reconcile_taints(n, "T", True) is None
    n["status"]["conditions"][0]["status"] = "True"
    assert nl.reconcile_taints(n, "T", True) == [{"key": "user", "effect": "NoSchedule"}]


def test_condition_and_cordon_taints():
    keys = {x["key"] for x in nl.wanted_taints(node("n", pressure="MemoryPressure", unschedulable=True))}
    assert keys == {t.MEMORY_PRESSURE, t.UNSCHEDULABLE}


def test_zone_limiter_paces_tokens():
    clock = FakeClock(0.0)
    lim = nl.ZoneLimiter(clock=clock)
    lim.set_rate("z", 0.1)
    assert lim.try_take("z")
    assert not lim.try_take("z")
    clock.t = 9.9
    assert not lim.try_take("z")
    clock.t = 10.1
    assert lim.try_take("z")
    lim.set_rate("z", 0.0)
    clock.t = 100
    assert not lim.try_take("z")


def test_taint_manager_honours_toleration_seconds():
    n = node("n", ready="Unknown", taints=[{"key": t.UNREACHABLE, "effect": "NoExecute"}])
    default_tol = {"key": t.UNREACHABLE, "operator": "Exists", "effect": "NoExecute",
                   "tolerationSeconds": 300}
    pods: list[dict[str, Any]] = [
        {"metadata": {"name": "intolerant"}, "spec": {}},
        {"metadata": {"name": "default"}, "spec": {"tolerations": [default_tol]}},
        {"metadata": {"name": "forever"}, "spec": {"tolerations": [{"operator": "Exists"}]}},
    ]
    due, nxt = nl.pods_to_evict(pods, n, {t.UNREACHABLE: 1000.0}, now=1000.0)
    assert [p["metadata"]["name"] for p in due] == ["intolerant"]
    assert nxt == 1300.0
    due, _ = nl.pods_to_evict(pods[1:], n, {t.UNREACHABLE: 1000.0}, now=1300.0)
    assert [p["metadata"]["name"] for p in due] == ["default"]


def test_tolerations():
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert t.tolerates({"key": "k", "operator": "Equal", "value": "v"}, taint)
    assert not t.tolerates({"key": "k", "value": "w"}, taint)
    assert t.tolerates({"operator": "Exists"}, taint)
    assert not t.tolerates({"key": "k", "operator": "Exists", "effect": "NoExecute"}, taint)
    assert t.first_untolerated([taint], [], effects=("NoExecute",)) is None
    assert t.no_execute_deadline([{"key": "k", "effect": "NoExecute"}],
                                 [{"key": "k", "operator": "Exists", "tolerationSeconds": -5}]) == 0.0

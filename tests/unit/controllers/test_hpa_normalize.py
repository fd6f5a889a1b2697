"""The HPA's stabilization and rate limits (horizontal.go's normalizeDesiredReplicas[WithBehaviors])."""

from __future__ import annotations

from nodeagent.controllers import hpa


def test_without_behavior_a_scale_down_waits_for_the_stabilization_window():
    n, h = hpa.Normalizer(downscale_stabilization=300), hpa.HPAHistory()
    n.record_initial(h, 5, 0.0)
    out = n.normalize(h, None, 5, 2, 1, 10, 100.0)
    assert out.replicas == 5 and out.able_reason == "ScaleDownStabilized"
    out = n.normalize(h, None, 5, 2, 1, 10, 301.0)  # the initial 5 has left the window
    assert out.replicas == 2 and out.able_reason == "ReadyForNewScale" and not out.limited


def test_without_behavior_a_scale_up_is_limited_to_twice_or_four():
    n, h = hpa.Normalizer(300), hpa.HPAHistory()
    out = n.normalize(h, None, 1, 10, 1, 20, 0.0)
    assert (out.replicas, out.limited, out.limited_reason) == (4, True, "ScaleUpLimit")
    out = n.normalize(hpa.HPAHistory(), None, 3, 30, 1, 20, 0.0)
    assert (out.replicas, out.limited_reason) == (6, "ScaleUpLimit")


def test_min_and_max_replicas_bound_the_recommendation():
    n = hpa.Normalizer(0)
    out = n.normalize(hpa.HPAHistory(), None, 3, 0, 2, 10, 0.0)
    assert (out.replicas, out.limited_reason) == (2, "TooFewReplicas")
    out = n.normalize(hpa.HPAHistory(), None, 8, 12, 1, 10, 0.0)
    assert (out.replicas, out.limited_reason) == (10, "TooManyReplicas")


def test_behavior_scale_up_policy_adds_one_pod_per_period():
    n, h = hpa.Normalizer(300), hpa.HPAHistory()
    behavior = {"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}
    rules = hpa.default_rules(behavior, 300)
    out = n.normalize(h, behavior, 1, 5, 1, 10, 0.0)
    assert (out.replicas, out.limited_reason) == (2, "ScaleUpLimit")
    n.record_scale(h, behavior, rules, 1, 2, 0.0)
    assert n.normalize(h, behavior, 2, 5, 1, 10, 30.0).replicas == 2  # the period's one pod is used
    assert n.normalize(h, behavior, 2, 5, 1, 10, 61.0).replicas == 3


def test_behavior_scale_down_window_and_disabled_policy():
    n, h = hpa.Normalizer(300), hpa.HPAHistory()
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 10}}
    n.record_initial(h, 4, 0.0)
    assert n.normalize(h, behavior, 4, 1, 1, 10, 5.0).replicas == 4  # 4 recommended within 10 s
    out = n.normalize(h, behavior, 4, 1, 1, 10, 20.0)
    assert out.replicas == 1
    off = {"scaleDown": {"selectPolicy": "Disabled", "stabilizationWindowSeconds": 0}}
    out = n.normalize(hpa.HPAHistory(), off, 4, 1, 1, 10, 0.0)
    assert (out.replicas, out.limited_reason) == (4, "ScaleDownLimit")


def test_condition_transition_time_moves_only_on_a_status_change():
    conds = hpa.set_condition([], "AbleToScale", "True", "A", "a", "t1")
    conds = hpa.set_condition(conds, "AbleToScale", "True", "B", "b", "t2")
    assert conds == [{"type": "AbleToScale", "status": "True", "reason": "B", "message": "b",
                      "lastTransitionTime": "t1"}]
    conds = hpa.set_condition(conds, "AbleToScale", "False", "C", "c", "t3")
    assert conds[0]["lastTransitionTime"] == "t3"

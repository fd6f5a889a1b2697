"""The HPA's replica calculator, ported as tables from kube's replica_calculator_test.go (one test per case,
named after it), through the metrics client's decoding of a PodMetricsList.

As upstream: every pod has two containers, each requesting `requests[i]` and using `levels[i]` millicores;
pods are ready unless `readiness` says otherwise, started at the zero time (long ago) unless `start` says
"hot" (just now) or "cool" (three minutes ago); the CPU initialization period is 2 minutes and the initial
readiness delay 10 seconds.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from nodeagent.api.times import rfc3339
from nodeagent.controllers import hpa

NOW = 1_700_000_000.0
HOT, COOL = NOW, NOW - 180
CONTAINERS = 2


@dataclasses.dataclass
class Case:
    current: int
    expected: int = 0
    error: str = ""
    requests: list[str] = dataclasses.field(default_factory=list)
    levels: list[int] = dataclasses.field(default_factory=list)
    pod_names: list[str] = dataclasses.field(default_factory=list)
    target: int = 0
    utilization: int = 0
    value: int = 0
    readiness: list[str] = dataclasses.field(default_factory=list)
    start: list[float] = dataclasses.field(default_factory=list)
    phase: list[str] = dataclasses.field(default_factory=list)
    deleting: list[bool] = dataclasses.field(default_factory=list)


def pods(tc: Case) -> list[dict[str, Any]]:
    out = []
    for i in range(max(tc.current, len(tc.phase))):
        containers: list[dict[str, Any]] = [{"name": f"container{j}"} for j in range(CONTAINERS)]
        if i < len(tc.requests):
            for c in containers:
                c["resources"] = {"requests": {"cpu": tc.requests[i]}}
        pod: dict[str, Any] = {
            "metadata": {"name": f"test-pod-{i}", "namespace": "test-namespace",
                         "labels": {"name": "test-pod"}},
            "spec": {"containers": containers},
            "status": {"phase": tc.phase[i] if tc.phase else "Running",
                       "startTime": rfc3339(tc.start[i] if tc.start else 0),
                       "conditions": [{"type": "Ready",
                                       "status": tc.readiness[i] if i < len(tc.readiness) else "True"}]}}
        if tc.deleting and tc.deleting[i]:
            pod["metadata"]["deletionTimestamp"] = rfc3339(NOW)
        out.append(pod)
    return out


def metrics_list(tc: Case) -> list[dict[str, Any]]:
    return [{"metadata": {"name": tc.pod_names[i] if i < len(tc.pod_names) else f"test-pod-{i}",
                          "namespace": "test-namespace", "labels": {"name": "test-pod"}},
             "timestamp": rfc3339(0), "window": "1m0s",
             "containers": [{"name": f"container{j}", "usage": {"cpu": f"{level}m"}}
                            for j in range(CONTAINERS)]}
            for i, level in enumerate(tc.levels)]


def run(tc: Case) -> None:
    readiness = hpa.Readiness(cpu_initialization_period=120, initial_readiness_delay=10, now=NOW)
    try:
        usage = hpa.pod_metrics(metrics_list(tc), "cpu")
        replicas, utilization, raw, _ = hpa.resource_replicas(
            tc.current, tc.target, "cpu", hpa.Tolerances(), pods(tc), usage, "", readiness)
    except hpa.MetricsError as e:
        assert tc.error, f"unexpected error: {e}"
        assert tc.error in str(e)
        return
    assert not tc.error, f"expected an error containing {tc.error!r}"
    assert (replicas, utilization, raw) == (tc.expected, tc.utilization, tc.value)


ONE = "1.0"


def test_replica_calc_disjoint_resources_metrics():
    run(Case(current=1, error="no metrics returned matched known pods", requests=[ONE], levels=[100],
             pod_names=["an-older-pod-name"], target=100))


def test_replica_calc_scale_up():
    run(Case(current=3, expected=5, requests=[ONE] * 3, levels=[300, 500, 700], target=30, utilization=50,
             value=CONTAINERS * 500))


def test_replica_calc_scale_up_unready_less_scale():
    run(Case(current=3, expected=4, readiness=["False", "True", "True"], requests=[ONE] * 3,
             levels=[300, 500, 700], target=30, utilization=60, value=CONTAINERS * 600))


def test_replica_calc_scale_up_hot_cpu_less_scale():
    run(Case(current=3, expected=4, start=[HOT, COOL, COOL], requests=[ONE] * 3, levels=[300, 500, 700],
             target=30, utilization=60, value=CONTAINERS * 600))


def test_replica_calc_scale_up_unready_no_scale():
    run(Case(current=3, expected=3, readiness=["True", "False", "False"], requests=[ONE] * 3,
             levels=[400, 500, 700], target=30, utilization=40, value=CONTAINERS * 400))


def test_replica_calc_scale_hot_cpu_no_scale():
    run(Case(current=3, expected=3, readiness=["True", "False", "False"], start=[COOL, HOT, HOT],
             requests=[ONE] * 3, levels=[400, 500, 700], target=30, utilization=40, value=CONTAINERS * 400))


def test_replica_calc_scale_up_ignores_failed_pods():
    run(Case(current=2, expected=4, readiness=["True", "True", "False", "False"],
             phase=["Running", "Running", "Failed", "Failed"], requests=[ONE] * 4, levels=[500, 700],
             target=30, utilization=60, value=CONTAINERS * 600))


def test_replica_calc_scale_up_ignores_deletion_pods():
    run(Case(current=2, expected=4, readiness=["True", "True", "False", "False"], phase=["Running"] * 4,
             deleting=[False, False, True, True], requests=[ONE] * 4, levels=[500, 700], target=30,
             utilization=60, value=CONTAINERS * 600))


def test_replica_calc_scale_down():
    run(Case(current=5, expected=3, requests=[ONE] * 5, levels=[100, 300, 500, 250, 250], target=50,
             utilization=28, value=CONTAINERS * 280))


def test_replica_calc_scale_down_include_unready_pods():
    run(Case(current=5, expected=2, readiness=["True", "True", "True", "False", "False"], requests=[ONE] * 5,
             levels=[100, 300, 500, 250, 250], target=50, utilization=30, value=CONTAINERS * 300))


def test_replica_calc_scale_down_exclude_unscheduled_pods():
    run(Case(current=5, expected=1, readiness=["True", "False", "False", "False", "False"],
             phase=["Running", "Pending", "Pending", "Pending", "Pending"], requests=[ONE] * 5, levels=[100],
             target=50, utilization=10, value=CONTAINERS * 100))


def test_replica_calc_scale_down_ignore_hot_cpu_pods():
    run(Case(current=5, expected=2, start=[COOL, COOL, COOL, HOT, HOT], requests=[ONE] * 5,
             levels=[100, 300, 500, 250, 250], target=50, utilization=30, value=CONTAINERS * 300))


def test_replica_calc_scale_down_ignores_failed_pods():
    run(Case(current=5, expected=3, readiness=["True"] * 5 + ["False"] * 2,
             phase=["Running"] * 5 + ["Failed"] * 2, requests=[ONE] * 7, levels=[100, 300, 500, 250, 250],
             target=50, utilization=28, value=CONTAINERS * 280))


def test_replica_calc_scale_down_ignores_deletion_pods():
    run(Case(current=5, expected=3, readiness=["True"] * 5 + ["False"] * 2, phase=["Running"] * 7,
             deleting=[False] * 5 + [True] * 2, requests=[ONE] * 7, levels=[100, 300, 500, 250, 250],
             target=50, utilization=28, value=CONTAINERS * 280))


def test_replica_calc_tolerance():
    run(Case(current=3, expected=3, requests=["0.9", "1.0", "1.1"], levels=[1010, 1030, 1020], target=100,
             utilization=102, value=CONTAINERS * 1020))


def test_replica_calc_superfluous_metrics():
    run(Case(current=4, expected=24, requests=[ONE] * 4, levels=[4000, 9500, 3000, 7000, 3200, 2000],
             target=100, utilization=587, value=CONTAINERS * 5875))


def test_replica_calc_missing_metrics():
    run(Case(current=4, expected=3, requests=[ONE] * 4, levels=[400, 95], target=100, utilization=24,
             value=495))


def test_replica_calc_empty_metrics():
    run(Case(current=4, error="unable to get metrics for resource cpu: no metrics returned from resource "
                              "metrics API", requests=[ONE] * 3, levels=[], target=100))


def test_replica_calc_empty_cpu_request():
    run(Case(current=1, error="missing request for", requests=[], levels=[200], target=100))


def test_replica_calc_missing_metrics_no_change_eq():
    run(Case(current=2, expected=2, requests=[ONE] * 2, levels=[1000], target=100, utilization=100,
             value=CONTAINERS * 1000))


def test_replica_calc_missing_metrics_no_change_gt():
    run(Case(current=2, expected=2, requests=[ONE] * 2, levels=[1900], target=100, utilization=190,
             value=CONTAINERS * 1900))


def test_replica_calc_missing_metrics_no_change_lt():
    run(Case(current=2, expected=2, requests=[ONE] * 2, levels=[600], target=100, utilization=60,
             value=CONTAINERS * 600))


def test_replica_calc_missing_metrics_unready_change():
    run(Case(current=3, expected=3, readiness=["False", "True", "True"], requests=[ONE] * 3,
             levels=[100, 450], target=50, utilization=45, value=CONTAINERS * 450))


def test_replica_calc_missing_metrics_hot_cpu_no_change():
    run(Case(current=3, expected=3, start=[HOT, COOL, COOL], requests=[ONE] * 3, levels=[100, 450], target=50,
             utilization=45, value=CONTAINERS * 450))


def test_replica_calc_missing_metrics_unready_scale_up():
    run(Case(current=3, expected=4, readiness=["False", "True", "True"], requests=[ONE] * 3,
             levels=[100, 2000], target=50, utilization=200, value=CONTAINERS * 2000))


def test_replica_calc_missing_metrics_hot_cpu_scale_up():
    run(Case(current=3, expected=4, readiness=["False", "True", "True"], start=[HOT, COOL, COOL],
             requests=[ONE] * 3, levels=[100, 2000], target=50, utilization=200, value=CONTAINERS * 2000))


def test_replica_calc_missing_metrics_unready_scale_down():
    run(Case(current=4, expected=3, readiness=["False", "True", "True", "True"], requests=[ONE] * 4,
             levels=[100, 100, 100], target=50, utilization=10, value=CONTAINERS * 100))


def test_replica_calc_during_rolling_update_with_max_surge():
    run(Case(current=2, expected=2, phase=["Running"] * 3, requests=[ONE] * 3, levels=[100, 100], target=50,
             utilization=10, value=CONTAINERS * 100))


def test_replica_calc_computed_tolerance_alg_implementation():
    start_pods = 10
    used = start_pods * 150  # 150 mCPU per pod
    requested = 2 * used  # each pod asks for twice what it uses: a 50% ratio
    per_pod = requested // start_pods
    target = abs(1 / ((requested // used) * (1 - 0.1))) + 0.01  # just past the tolerance
    final_target = int(target * 100)
    ratio = used / (requested * target)
    tc = Case(current=start_pods, expected=math.ceil(ratio * start_pods), levels=[used // 10] * 10,
              requests=[f"{per_pod + d}m" for d in (100, -100, 10, -10, 2, -2, 1, -1, 0, 0)],
              target=final_target, utilization=used * 100 // requested, value=CONTAINERS * used // 10)
    run(tc)
    # just inside the tolerance: no change
    tc.target = int((abs(1 / ((requested // used) * (1 - 0.1))) + 0.004) * 100)
    tc.expected = start_pods
    run(tc)


# -- beyond upstream's table: a named container, and an AverageValue target --------------------------------

def test_container_resource_uses_only_the_named_containers_request_and_usage():
    tc = Case(current=2, requests=[ONE] * 2, levels=[800, 800], target=40)
    usage = hpa.pod_metrics(metrics_list(tc), "cpu", "container1")
    replicas, utilization, raw, _ = hpa.resource_replicas(2, 40, "cpu", hpa.Tolerances(), pods(tc), usage,
                                                          "container1", hpa.Readiness(120, 10, NOW))
    assert (replicas, utilization, raw) == (4, 80, 800)


def test_container_resource_naming_a_missing_container_is_an_error():
    tc = Case(current=1, requests=[ONE], levels=[800], target=40)
    usage = {"test-pod-0": hpa.PodMetric(800, 0.0, 60.0)}
    with pytest.raises(hpa.MetricsError, match="container nope not found in Pod test-pod-0"):
        hpa.resource_replicas(1, 40, "cpu", hpa.Tolerances(), pods(tc), usage, "nope",
                              hpa.Readiness(120, 10, NOW))


def test_average_value_target_scales_by_the_average_usage():
    tc = Case(current=2, requests=[ONE] * 2, levels=[300, 300])
    usage = hpa.pod_metrics(metrics_list(tc), "cpu")  # 600m per pod
    replicas, avg, _ = hpa.raw_resource_replicas(2, 200, "cpu", hpa.Tolerances(), pods(tc), usage,
                                                 hpa.Readiness(120, 10, NOW))
    assert (replicas, avg) == (6, 600)

"""The benchmark's workloads run end to end at their smallest size (so the bench doesn't rot)."""

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "scheduler.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_scheduler", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("kind", ["basic", "nodeaffinity", "antiaffinity", "preemption", "preemptionbasic"])
async def test_workload_binds_every_measured_pod(bench, kind):
    rate, cpu_rate, pods, stats = await bench.run_one(kind, 100, False)
    n_init, n_measure = bench.counts(kind, 100)
    assert pods == n_measure and rate > 0 and cpu_rate > 0
    if kind == "preemption":  # PreemptionAsync: churned high-priority pods are bound too, by preempting
        assert stats["scheduled"] >= n_init + n_measure
        assert stats["scheduled"] - n_init - n_measure <= stats["preemptions"]
    else:
        assert stats["scheduled"] == n_init + n_measure
    if kind == "preemptionbasic":
        assert stats["preemptions"] >= n_measure

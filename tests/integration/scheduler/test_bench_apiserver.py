"""The benchmark's through-the-apiserver mode runs each workload end to end at a tiny size (so it doesn't
rot): every measured pod bound through the API, preemption's victims deleted through it."""

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[3] / "bench" / "scheduler.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_scheduler_api", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.parametrize("kind,nodes,measure", [("basic", 5, 30), ("nodeaffinity", 5, 10),
                                                ("antiaffinity", 10, 6)])
async def test_apiserver_mode_binds_every_measured_pod(tmp_path, kind, nodes, measure):
    rate, cpu_rate, pods, setup, client_cpu, victims = await _bench().run_apiserver(
        kind, nodes, tmp_path / "srv", measure=measure)
    assert pods == measure and rate > 0 and cpu_rate > 0 and setup > 0 and client_cpu >= 0
    assert victims == 0


async def test_apiserver_mode_preempts_through_the_api(tmp_path):
    # PreemptionBasic: every node holds four 900m low-priority pods, so each 3-cpu high-priority pod
    # (priority from a PriorityClass) binds only after the scheduler deleted three of them
    rate, cpu_rate, pods, setup, client_cpu, victims = await _bench().run_apiserver(
        "preemptionbasic", 3, tmp_path / "srv", measure=3)
    assert pods == 3 and rate > 0
    assert victims == 9

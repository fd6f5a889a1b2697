"""The benchmark's through-the-apiserver mode runs end to end at a tiny size (so it doesn't rot)."""

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[3] / "bench" / "scheduler.py"


async def test_apiserver_mode_binds_every_measured_pod(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_scheduler_api", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rate, cpu_rate, pods, setup, client_cpu = await bench.run_apiserver("basic", 5, tmp_path / "srv",
                                                                        measure=30)
    assert pods == 30 and rate > 0 and cpu_rate > 0 and setup > 0 and client_cpu >= 0

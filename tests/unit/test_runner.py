"""The component runner: a stop signal cancels every component,
and one that is slow to stop says where it waits."""

import asyncio
import logging
import os
import signal
import sys
import types

from nodeagent import runner


def _install(name: str, **fns) -> str:
    mod = types.ModuleType(name)
    mod.__dict__.update(fns)
    sys.modules[name] = mod
    return name


def test_stop_signal_cancels_components_and_reports_a_slow_one(monkeypatch, caplog):
    monkeypatch.setattr(runner, "STOP_REPORT_EVERY", 0.05)
    stopped = []

    async def quick(config, ready):
        ready.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.append("quick")

    async def linger_in_cleanup():
        await asyncio.sleep(0.3)

    async def slow(config, ready):
        ready.set()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.shield(linger_in_cleanup())
            stopped.append("slow")

    async def signal_when_ready(config, ready):
        ready.set()
        os.kill(os.getpid(), signal.SIGINT)
        try:
            await asyncio.Event().wait()
        finally:
            stopped.append("kick")

    mod = _install("_runner_test_components", quick=quick, slow=slow, kick=signal_when_ready)
    comps = [runner.Component("quick", f"{mod}:quick", "t"), runner.Component("slow", f"{mod}:slow", "t"),
             runner.Component("kick", f"{mod}:kick", "t", after=("quick", "slow"))]
    try:
        with caplog.at_level(logging.INFO, logger="nodeagent.runner"):
            rc = asyncio.run(runner.run_components(comps, None))
    finally:
        sys.modules.pop(mod, None)
    assert rc == 0
    assert stopped[0] == "kick", stopped  # it started after the others, so it stops before them
    assert sorted(stopped[1:]) == ["quick", "slow"]
    slow_reports = [r.getMessage() for r in caplog.records if "still stopping" in r.getMessage()]
    assert slow_reports, caplog.text
    assert all(m.startswith("slow:") for m in slow_reports), slow_reports
    assert "-> slow (" in slow_reports[0] and "test_runner.py" in slow_reports[0], slow_reports[0]
    assert "stopped cleanly" in caplog.text


def test_stop_order_is_the_reverse_of_the_start_dependencies():
    c = runner.Component
    comps = [c("cni", "m:f", "t"), c("cri", "m:f", "t", after=("cni",)), c("apiserver", "m:f", "t"),
             c("kubelet", "m:f", "t", after=("cri", "apiserver")),
             c("netproxy", "m:f", "t", after=("apiserver",)),
             c("dns", "m:f", "t", after=("apiserver", "missing"))]
    assert runner.stop_order(comps) == [["dns", "kubelet", "netproxy"], ["apiserver", "cri"], ["cni"]]


def test_stop_order_survives_a_cycle():
    c = runner.Component
    cycle = [c("a", "m:f", "t", after=("b",)), c("b", "m:f", "t", after=("a",))]
    assert runner.stop_order(cycle) == [["a", "b"]]

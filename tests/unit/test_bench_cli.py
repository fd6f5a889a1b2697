"""Every benchmark in bench/ names `--plot PATH` in its --help, and the ones with a quick in-process mode
(no root, seconds) write the PNG when asked. The long and root benches are only asked for --help here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
# shared code, not benchmarks
HELPERS = {"report.py", "pyspy.py", "cpuprofile.py", "memprofile.py", "netproxy_common.py", "__init__.py"}
BENCHES = sorted(p.name for p in BENCH.glob("*.py") if p.name not in HELPERS)
PNG = b"\x89PNG\r\n\x1a\n"


def run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          check=False, cwd=BENCH.parent)


def test_the_list_covers_the_benches():
    assert {"pod_startup.py", "scheduler.py", "store.py", "kubelet_logic.py"} <= set(BENCHES)


@pytest.mark.parametrize("name", BENCHES)
def test_help_names_plot(name):
    p = run([f"bench/{name}", "--help"])
    assert p.returncode == 0, p.stderr
    assert "--plot PATH" in p.stdout, p.stdout


QUICK = {  # in-process, unprivileged, a few seconds each on a busy 2-core machine
    "kubelet_logic.py": ["--pods", "10", "--rounds", "5"],
    "scheduler.py": ["--nodes", "20", "--workloads", "basic", "--measure", "20", "--apiserver", ""],
    "store.py": ["--backends", "memory", "--objects", "1000,1000", "--gets", "200", "--seconds", "0.1",
                 "--watchers", "2", "--watch-events", "20"],
    "housekeeping.py": ["--pods", "5", "--passes", "3", "--limited", "1"],
    "authn.py": ["-n", "20", "--no-server"],
    "authz.py": ["--objects", "20", "-n", "20", "--no-e2e"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(QUICK))
def test_quick_mode_writes_the_png(name, tmp_path):
    out = tmp_path / "plot.png"
    p = run([f"bench/{name}", *QUICK[name], "--plot", str(out)], timeout=240)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert f"plot: {out}" in p.stdout
    assert out.read_bytes()[:8] == PNG


def test_percentiles_have_one_place():
    """bench/report.py's pct is the only percentile: a bench with its own copy would print p99s that
    mean something else than its neighbours'."""
    own = [name for name in BENCHES if "\ndef pct(" in (BENCH / name).read_text()]
    assert own == []


def test_plot_into_a_missing_folder_is_refused_at_start(tmp_path):
    p = run(["bench/kubelet_logic.py", "--pods", "1", "--rounds", "1", "--plot", str(tmp_path / "no/x.png")])
    assert p.returncode == 2
    assert "does not exist" in p.stderr and "status:" not in p.stdout  # refused before measuring

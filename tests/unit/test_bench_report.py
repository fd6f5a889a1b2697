"""bench/report.py: the one percentile, p50/p99 table and PNG plotting every benchmark uses."""

from __future__ import annotations

import math

from bench.report import latency_table, pct, plot_bars, plot_cdf, plot_lines


def test_pct_is_nearest_rank():
    xs = [float(i) for i in range(1, 101)]  # 1..100
    assert pct(xs, 0.5) == 50 and pct(xs, 0.99) == 99 and pct(xs, 1.0) == 100
    assert pct([3.0, 1.0, 2.0], 0.5) == 2
    assert pct([7.0], 0.99) == 7
    assert math.isnan(pct([], 0.5))


def test_latency_table_rows_in_milliseconds():
    text = latency_table({"ours ADD": [0.010, 0.020, 0.030], "reference ADD": []})
    lines = text.splitlines()
    assert lines[0].split() == ["n", "p50", "p99"]
    assert lines[1].split() == ["ours", "ADD", "3", "20.00", "30.00", "ms"]
    assert lines[2].split() == ["reference", "ADD", "—"]


def test_plots_are_pngs(tmp_path):
    png = b"\x89PNG\r\n\x1a\n"
    plot_cdf(str(tmp_path / "cdf.png"), {"a": [0.01, 0.02], "empty": []}, "t")
    plot_lines(str(tmp_path / "lines.png"), {"full": [(1000, 0.5), (100, 0.1)]}, "t", "Services", "s")
    plot_bars(str(tmp_path / "bars.png"), {"x": {"p50": 1.0, "p99": 2.0}}, "t", "ms")
    for name in ("cdf.png", "lines.png", "bars.png"):
        assert (tmp_path / name).read_bytes()[:8] == png

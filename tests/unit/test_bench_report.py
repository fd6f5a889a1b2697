"""bench/report.py: the one percentile, p50/p99 table and PNG plotting every benchmark uses."""

from __future__ import annotations

import math

from bench.report import CdfPanel, latency_table, pct, plot_bars, plot_cdf, plot_cdf_panels, plot_lines


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


def test_cdf_panels_and_log_bars_are_pngs(tmp_path):
    png = b"\x89PNG\r\n\x1a\n"
    panels = [CdfPanel("in-process", {"a": [1e-5, 2e-5, 3e-5]}, "µs", 1e6),
              CdfPanel("end to end", {"a": [0.001, 0.004], "b": []}),
              CdfPanel("nothing measured", {"c": []})]  # left out of the figure
    plot_cdf_panels(str(tmp_path / "panels.png"), panels, "t")
    plot_bars(str(tmp_path / "log.png"), {"creates/s with a long name": {"memory": 5000.0, "sqlite": 300.0},
                                          "lists/s with a long name too": {"memory": 10.0}}, "t", "/s",
              logy=True)
    plot_lines(str(tmp_path / "many.png"), {"pods": [(i / 10, i) for i in range(500)]}, "t", "s", "pods")
    for name in ("panels.png", "log.png", "many.png"):
        assert (tmp_path / name).read_bytes()[:8] == png


def test_no_panel_with_samples_still_draws_one(tmp_path):
    plot_cdf_panels(str(tmp_path / "empty.png"), [CdfPanel("nothing", {"a": []})])
    assert (tmp_path / "empty.png").read_bytes()[:4] == b"\x89PNG"

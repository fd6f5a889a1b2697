"""What every benchmark prints and draws: percentiles of samples, the p50/p99 table, and (with `--plot
PATH`) a PNG of the same figures — one place, so each bench only measures.

Percentiles are nearest-rank on the sorted samples (`pct(xs, 0.99)`), as the benches always printed
them. Plots use matplotlib's Agg backend (no display): a CDF of latency samples per series, lines of a
value against a size (sync time against Services) or against time, grouped bars (log scale when the
groups differ by orders of magnitude), and CDF panels stacked in one PNG when a bench measures in two units.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple


def pct(xs: Sequence[float], q: float) -> float:
    """The q-quantile (0 < q <= 1) of `xs`, nearest rank; NaN when there are none."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def latency_row(name: str, xs: Sequence[float], unit: str = "ms", scale: float = 1000.0,
                width: int = 34) -> str:
    """`name  n  p50  p99` for samples in seconds shown in `unit` (× `scale`)."""
    if not xs:
        return f"{name:<{width}} {'—':>7}"
    return (f"{name:<{width}} {len(xs):>7} {pct(xs, 0.5) * scale:>10.2f} {pct(xs, 0.99) * scale:>10.2f}"
            f"  {unit}")


def latency_table(rows: Mapping[str, Sequence[float]], unit: str = "ms", scale: float = 1000.0,
                  title: str = "") -> str:
    """The p50/p99 table of several sample sets (seconds), one row each."""
    width = max([len(k) for k in rows] + [10]) + 2
    lines = [title] if title else []
    lines.append(f"{'':<{width}} {'n':>7} {'p50':>10} {'p99':>10}")
    lines += [latency_row(k, v, unit, scale, width) for k, v in rows.items()]
    return "\n".join(lines)


def _plot_path(value: str) -> str:
    """--plot's PATH, refused at start (not after a long run) when its folder is missing or read-only."""
    folder = os.path.dirname(os.path.abspath(value))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{value}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"{value}: folder {folder} is not writable")
    return value


def add_plot_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plot", metavar="PATH", default=None, type=_plot_path,
                   help="also write the figures as a PNG (matplotlib) to PATH")


def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, imported only when a plot is asked for."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cdf_axes(ax: Any, series: Mapping[str, Sequence[float]], title: str, unit: str, scale: float) -> None:
    for name, xs in series.items():
        if not xs:
            continue
        s = sorted(x * scale for x in xs)
        ax.step(s, [(i + 1) / len(s) for i in range(len(s))], where="post",
                label=f"{name} (p50 {pct(s, 0.5):.1f}, p99 {pct(s, 0.99):.1f} {unit})")
    ax.set_xlabel(unit)
    ax.set_ylabel("fraction of samples")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="lower right")
    else:
        ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)


def plot_cdf(path: str, series: Mapping[str, Sequence[float]], title: str, unit: str = "ms",
             scale: float = 1000.0) -> None:
    """One CDF line per series of latency samples (seconds), with each series' p50/p99 in its label."""
    plot_cdf_panels(path, [CdfPanel(title, series, unit, scale)])


class CdfPanel(NamedTuple):
    """One CDF chart of a figure: its title, the sample series (seconds) and the unit they are shown in."""

    title: str
    series: Mapping[str, Sequence[float]]
    unit: str = "ms"
    scale: float = 1000.0


def plot_cdf_panels(path: str, panels: Sequence[CdfPanel], title: str = "") -> None:
    """Several CDF charts stacked in one PNG, for a bench whose phases are measured in different units
    (in-process µs beside end-to-end ms)."""
    plt = _pyplot()
    panels = [p for p in panels if any(p.series.values())] or list(panels[:1])
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 3.2 * len(panels) + 0.6), dpi=90, squeeze=False)
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        _cdf_axes(ax, panel.series, panel.title, panel.unit, panel.scale)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_lines(path: str, series: Mapping[str, Sequence[tuple[float, float]]], title: str, xlabel: str,
               ylabel: str, logx: bool = False) -> None:
    """One line per series of (x, y) points, e.g. sync time against the number of Services, or a count
    against time (points marked only when there are few)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=90)
    for name, pts in series.items():
        pts = sorted(pts)
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o" if len(pts) <= 50 else None, label=name)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_bars(path: str, groups: Mapping[str, Mapping[str, float]], title: str, ylabel: str,
              logy: bool = False) -> None:
    """Grouped bars: one group per key of `groups`, one bar per series inside it (p50 and p99, say);
    `logy` when the groups' figures differ by orders of magnitude."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=90)
    names = list(groups)
    series = list(dict.fromkeys(k for g in groups.values() for k in g))
    width = 0.8 / max(1, len(series))
    for i, s in enumerate(series):
        ax.bar([j + i * width for j in range(len(names))], [groups[n].get(s, 0.0) for n in names], width,
               label=s)
    crowded = sum(len(n) for n in names) > 60
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(names))], names, fontsize=8,
                  rotation=20 if crowded else 0, ha="right" if crowded else "center")
    if logy:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

"""`nodeagent status`'s eviction table: each eviction signal as the kubelet's eviction manager observes it
on this host (memory.available from /proc/meminfo and the root memory cgroup's working set, nodefs and
imagefs from statvfs of the kubelet's and the image store's directories, pid.available), beside the
threshold the running `up`/`agent` was given (`--eviction-hard`/`--eviction-soft` from its command line,
else the kubelet's defaults) and whether it is crossed."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from nodeagent.kubelet.eviction import signals
from nodeagent.kubelet.eviction import thresholds as th
from nodeagent.layout import Layout


def flags_of(pid: int | None) -> list[str]:
    """The command line of the process serving the node ([] when none runs or it cannot be read)."""
    if pid is None:
        return []
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _flag(argv: Sequence[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def eviction_rows(layout: Layout, argv: Sequence[str]) -> list[tuple[str, str, str, str, str]]:
    """(signal, available, capacity, threshold, crossed) for every signal this host reports; a threshold
    flag the kubelet would refuse is shown as the error it is."""
    hard = _flag(argv, "--eviction-hard")
    try:
        limits = th.parse_thresholds(th.DEFAULT_HARD if hard is None else hard,
                                     _flag(argv, "--eviction-soft"),
                                     _flag(argv, "--eviction-soft-grace-period"))
    except th.ThresholdError as e:
        return [("(thresholds)", "", "", f"invalid: {e}", "")]
    nodefs = layout.kubelet_root_dir if os.path.isdir(layout.kubelet_root_dir) else layout.data_dir
    imagefs = layout.image_dir if os.path.isdir(layout.image_dir) else None
    observed = signals.observe(nodefs if os.path.isdir(nodefs) else "/", imagefs)
    rows = []
    for name, obs in observed.items():
        mine = [t for t in limits if t.signal == name]
        shown = ", ".join(f"<{_limit(name, t.value)}" + (f" (soft, {t.grace_period:g}s)" if t.soft else "")
                          for t in mine)
        crossed = any(obs.available < t.value.resolve(obs.capacity) for t in mine)
        rows.append((name, _amount(name, obs.available), _amount(name, obs.capacity), shown or "-",
                     "yes" if crossed else "no"))
    return rows


def _limit(signal: str, value: th.Value) -> str:
    if value.quantity is None:
        return str(value)
    return _amount(signal, value.quantity)


def _amount(signal: str, value: object) -> str:
    n = int(value)  # type: ignore[call-overload]  # a Fraction
    if signal.endswith(".available") and signal != th.PID_AVAILABLE:
        return f"{n / 2**20:.0f}Mi" if n >= 2**20 or n == 0 else str(n)
    return str(n)

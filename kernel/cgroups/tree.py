"""A whole cgroup subtree in every hierarchy: where it is, and killing what runs in it before removing it
bottom-up (what `nodeagent reset` and `nodeagent lab down` do with a node's cgroup root)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from kernel.cgroups import hierarchies


def tree_dirs(root: str) -> list[Path]:
    """Every existing directory of the cgroup `root` ("nodeagent-ab12cd", "kubepods") in each hierarchy
    (every v1 controller's, named ones, the unified tree)."""
    rel = root.strip("/")
    return [p for p in (Path(h, rel) for h in hierarchies()) if rel and p.is_dir()]


def tree_pids(root: str) -> set[int]:
    pids: set[int] = set()
    for top in tree_dirs(root):
        for d, _dirs, _files in os.walk(top):
            with contextlib.suppress(OSError, ValueError):
                pids |= {int(x) for x in Path(d, "cgroup.procs").read_text().split()}
    return pids


def kill_tree(root: str, budget_s: float = 5.0) -> None:
    """SIGKILL every process left in the subtree (again, while any remain, within the budget), then
    rmdir its directories deepest first; already gone is fine."""
    end = time.monotonic() + budget_s
    while True:
        pids = tree_pids(root)
        if not pids or time.monotonic() > end:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    for top in tree_dirs(root):
        for d, _dirs, _files in sorted(os.walk(top, topdown=False), key=lambda t: -len(t[0])):
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)

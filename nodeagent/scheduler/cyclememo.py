"""Each node's filter verdict and score total for a run of pods of one shape, kept by node position.

At 5,000 nodes a cycle filters and scores the ~500 nodes kube-scheduler's adaptive percentage asks for, from
a start index that rotates over the whole list: with pods of one shape (a Deployment's replicas,
scheduler_perf's template), only the few nodes that changed since the last cycle can answer differently,
but reading 500 NodeInfos scattered over the heap costs more than the answers (the score caches alone
took 0.3-0.4 ms a cycle with the CPU caches cold, as the rest of the server leaves them). Here each
node's verdict and weighted score total sit in flat lists indexed by the node's position in the snapshot,
so a cycle reads slices of them (C-level copies and scans), and only the nodes the scheduler cache
reports changed (`Cache.changes_since`: every pod placed or removed, every node update) are filtered or
scored again.

It applies only where the answers are pure functions of the node and the pod's shape: every active
filter names the shape (`filter_shape`), and likewise every active score plugin (`score_shape`); and
only without extenders, a PreFilter node-name restriction or a nomination of the pod itself (the callers
check those). Nodes with other pods nominated to them are checked again with those pods, as the general
walk does.
What-ifs that change a NodeInfo and restore it (preemption, nominated pods) leave the answers valid.
The window walked, the feasible nodes in order, the scores and so the choice are the ones the general
path computes; when no node is feasible the caller reruns the general path for the statuses.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Hashable
from typing import Any

from nodeagent.scheduler.cache import Cache, Snapshot
from nodeagent.scheduler.framework.interface import CycleState
from nodeagent.scheduler.framework.runtime import Framework
from nodeagent.scheduler.framework.types import NodeInfo, PodInfo


def _shape(plugins: list[Any], method: str, pod: PodInfo) -> tuple[Any, ...] | None:
    """((plugin, shape), ...) when every plugin names the pod's shape through `method`, else None."""
    out: list[tuple[str, Hashable]] = []
    for p in plugins:
        of = getattr(p, method, None)
        shape: Hashable = of(pod) if of is not None else None
        if shape is None:
            return None
        out.append((p.name, shape))
    return tuple(out)


def _unknown(values: list[Any], a: int, b: int) -> list[int]:
    """Indexes in [a, b) whose value is None, found by C-level index() calls."""
    out: list[int] = []
    i = a - 1
    while True:
        try:
            i = values.index(None, i + 1, b)
        except ValueError:
            return out
        out.append(i)


class CycleMemo:
    """One framework's verdicts and totals by node position, for the last filter and score shapes."""

    def __init__(self, cache: Cache):
        self._cache = cache
        self._nodes: list[NodeInfo] | None = None  # the snapshot list the positions index
        self._pos: dict[NodeInfo, int] = {}
        self._seq = 0  # the cache's change sequence the lists are up to date with
        self._fit_key: tuple[Any, ...] | None = None
        self._fit: list[bool | None] = []
        self._score_key: tuple[Any, ...] | None = None
        self._tot: list[int | None] = []

    def _sync(self, nodes: list[NodeInfo]) -> None:
        """Follow the snapshot: a new node list resets everything; changed nodes forget their answers."""
        seq, changed = self._cache.changes_since(self._seq)
        if nodes is not self._nodes or changed is None:
            self._nodes = nodes
            self._pos = {n: i for i, n in enumerate(nodes)}
            self._fit_key = self._score_key = None
            self._fit = [None] * len(nodes)
            self._tot = [None] * len(nodes)
        elif changed:
            pos, fit, tot = self._pos, self._fit, self._tot
            for n in changed:
                i = pos.get(n)
                if i is not None:
                    fit[i] = None
                    tot[i] = None
        self._seq = seq

    def find_feasible(self, fw: Framework, state: CycleState, pi: PodInfo, snap: Snapshot, filters: list[Any],
                      want: int, start: int, recheck: Collection[str] = (),
                      passes: Callable[[NodeInfo], bool] | None = None
                      ) -> tuple[list[NodeInfo], list[int], int] | None:
        """find_nodes_that_fit's walk from `start` until `want` feasible nodes: (feasible nodes, their
        positions, nodes processed); None when a filter does not name the pod's shape. Feasible nodes
        named in `recheck` (those with nominated pods) must also pass `passes`, in walk order."""
        key = _shape(filters, "filter_shape", pi)
        if key is None:
            return None
        nodes = snap.nodes
        self._sync(nodes)
        n_all = len(nodes)
        if key != self._fit_key:
            self._fit_key = key
            self._fit = [None] * n_all
        fit = self._fit
        pos_of = self._pos.get
        again = {i for n in recheck if (i := pos_of(snap.get(n))) is not None}  # type: ignore[arg-type]
        feasible: list[NodeInfo] = []
        positions: list[int] = []
        processed = 0
        pos = start
        while processed < n_all and len(feasible) < want:
            size = min(want - len(feasible), n_all - processed)
            end = pos + size
            ranges = ((pos, end),) if end <= n_all else ((pos, n_all), (0, end - n_all))
            pos = end % n_all
            processed += size
            for a, b in ranges:
                unknown = _unknown(fit, a, b)
                if unknown:
                    ok = set(fw.filter_chunk(state, pi, [nodes[i] for i in unknown], filters, {}))
                    for i in unknown:
                        fit[i] = nodes[i] in ok
                fs = fit[a:b]  # a copy: the rechecks below change it, not the memo
                for i in sorted(i for i in again if a <= i < b and fit[i]):
                    if passes is not None and not passes(nodes[i]):
                        fs[i - a] = False
                if False not in fs:
                    feasible += nodes[a:b]
                    positions += range(a, b)
                else:
                    feasible += itertools.compress(nodes[a:b], fs)
                    positions += itertools.compress(range(a, b), fs)
        return feasible, positions, processed

    def totals(self, fw: Framework, state: CycleState, pi: PodInfo, feasible: list[NodeInfo],
               positions: list[int]) -> list[int] | None:
        """run_score's totals for the nodes find_feasible returned (after PreScore); None when a score
        plugin does not name the pod's shape."""
        skip = state.skip_score
        active = [p for p in fw.score_plugins if p.name not in skip] if skip else fw.score_plugins
        key = _shape(active, "score_shape", pi)
        if key is None:
            return None
        if key != self._score_key:
            self._score_key = key
            self._tot = [None] * len(self._fit)
        tot = self._tot
        scores = list(map(tot.__getitem__, positions))
        if None in scores:
            unknown = _unknown(scores, 0, len(scores))
            fresh = fw.score_totals(active, state, pi, [feasible[k] for k in unknown])
            for k, s in zip(unknown, fresh, strict=True):
                tot[positions[k]] = scores[k] = s
        return scores  # type: ignore[return-value]  # no None left

"""Per-node scores of the last pod shape, kept while the node is unchanged.

A resource score (LeastAllocated, BalancedAllocation) is a pure function of the pod's requests and the
node's requested and allocatable resources. Pods arrive in runs of one shape (a Deployment's replicas),
and between two cycles only the node that took the last pod changes, so each cycle recomputes the
scores of the nodes that changed and reads the rest. A node is unchanged while it is the same NodeInfo
object at the same generation (NodeInfo bumps it on every pod added or removed and every node update).
Caching starts with a shape's second pod in a row: a stream of pods of ever-changing shapes costs one
comparison per cycle, not a store per node.
"""

from __future__ import annotations

from collections.abc import Hashable

from nodeagent.scheduler.framework.types import NodeInfo


class NodeScoreCache:
    """One plugin's cache: node name -> (NodeInfo, its generation, score) for one pod shape."""

    __slots__ = ("_shape", "_scores")

    def __init__(self) -> None:
        self._shape: Hashable = None
        self._scores: dict[str, tuple[NodeInfo, int, int]] = {}

    def for_shape(self, shape: Hashable) -> dict[str, tuple[NodeInfo, int, int]] | None:
        """The entries for pods of `shape` when the last cycle's pod had it too; None on a change of
        shape (the old entries are dropped: score without the cache)."""
        if shape == self._shape:
            return self._scores
        self._shape = shape
        self._scores = {}
        return None

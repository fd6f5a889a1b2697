"""PreFilter's topology counts kept across a run of pods of one shape, node by node.

PreFilter counts, over every node's pods, the existing pods whose required anti-affinity the incoming pod
would violate and the existing pods matching the incoming pod's required terms (kube-scheduler does the
same walk per cycle, on 16 goroutines). For a run of pods of one shape (namespace, labels and terms) only
the nodes the scheduler cache reports changed since the last cycle can count differently, so each node's
share is kept and the totals follow those nodes: the counts are the ones a fresh walk gives. A new node
list, other namespace labels or another shape start afresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.scheduler.cache import Snapshot
from nodeagent.scheduler.framework.topology import PairCounts, bump
from nodeagent.scheduler.framework.types import AffinityTerm, NodeInfo, PodInfo

# one node's share: (existing anti-affinity pairs, affinity pairs, anti-affinity pairs), each (key, labels)
_Share = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]
_MAX_MEMO = 100_000


def shape_of(pod: PodInfo) -> tuple[Any, ...]:
    """What the counts depend on besides the nodes and namespace labels."""
    return (pod.match_key, tuple((t.id, t.topology_key) for t in pod.required_affinity),
            tuple((t.id, t.topology_key) for t in pod.required_anti_affinity))


class RunCounts:
    """Totals of (existing, affinity, anti) counts and each node's share, for one shape."""

    def __init__(self) -> None:
        self._key: Any = None
        self._nodes: list[NodeInfo] | None = None
        self._nsl: Mapping[str, Mapping[str, str]] | None = None
        self._seq = 0
        self._shares: dict[NodeInfo, tuple[_Share, Mapping[str, str]]] = {}
        self.existing: PairCounts = {}
        self.affinity: PairCounts = {}
        self.anti: PairCounts = {}
        self.existing_keys: set[str] = set()
        self._seen: dict[int, bool] = {}  # existing anti-affinity term id -> matches the incoming pod
        self._memo: dict[Any, tuple[bool, tuple[AffinityTerm, ...]]] = {}  # existing pod's match_key -> ...

    def follow(self, snap: Snapshot, pod: PodInfo, nsl: Mapping[str, Mapping[str, str]]) -> None:
        """Bring the totals up to the snapshot for `pod`'s shape."""
        key = shape_of(pod)
        seq, changed = snap.changes_since(self._seq)
        self._seq = seq
        if key != self._key or snap.nodes is not self._nodes or changed is None or nsl != self._nsl:
            self._key, self._nodes, self._nsl = key, snap.nodes, nsl
            self._shares = {}
            self.existing, self.affinity, self.anti = {}, {}, {}
            self.existing_keys = set()
            self._seen, self._memo = {}, {}
            for ni in snap.nodes:
                if ni.pods:
                    self._add(ni, pod, nsl)
            return
        for ni in dict.fromkeys(changed):  # each changed node once, in order
            old = self._shares.pop(ni, None)
            if old is not None:
                self._apply(old[0], old[1], -1)
            if ni.node and ni.pods:
                self._add(ni, pod, nsl)

    def _add(self, ni: NodeInfo, pod: PodInfo, nsl: Mapping[str, Mapping[str, str]]) -> None:
        seen, memo = self._seen, self._memo
        if len(memo) > _MAX_MEMO:
            memo.clear()
        existing: list[str] = []
        if ni.pods_with_required_anti_affinity:
            for ep in ni.pods.values():
                for t in ep.required_anti_affinity:
                    m = seen.get(t.id)
                    if m is None:
                        m = seen[t.id] = t.matches(pod, nsl)
                    if m:
                        existing.append(t.topology_key)
        aff_keys: list[str] = []
        anti_keys: list[str] = []
        aff, anti = pod.required_affinity, pod.required_anti_affinity
        if aff or anti:
            for ep in ni.pods.values():
                r = memo.get(ep.match_key)
                if r is None:
                    r = memo[ep.match_key] = (bool(aff) and all(t.matches(ep, nsl) for t in aff),
                                              tuple(t for t in anti if t.matches(ep, nsl)))
                if r[0]:
                    aff_keys.extend(t.topology_key for t in aff)
                anti_keys.extend(t.topology_key for t in r[1])
        share = (tuple(existing), tuple(aff_keys), tuple(anti_keys))
        if existing or aff_keys or anti_keys:
            self._shares[ni] = (share, ni.labels)
            self._apply(share, ni.labels, 1)

    def _apply(self, share: _Share, labels: Mapping[str, str], n: int) -> None:
        existing, aff_keys, anti_keys = share
        for k in existing:
            bump(self.existing, k, labels, n)
            if n > 0:
                self.existing_keys.add(k)  # a key may stay after its count falls to zero: Filter reads 0
        for k in aff_keys:
            bump(self.affinity, k, labels, n)
        for k in anti_keys:
            bump(self.anti, k, labels, n)

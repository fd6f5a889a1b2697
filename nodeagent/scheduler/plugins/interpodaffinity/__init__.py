"""InterPodAffinity: required pod affinity / anti-affinity over topology domains (Filter, including
existing pods' anti-affinity against the incoming pod) and preferred terms (Score).

PreFilter counts, per (topologyKey, value) domain, the existing pods matching the incoming pod's
terms and the existing pods whose anti-affinity the incoming pod would violate; Filter is then
dict lookups per node. The counts follow pod add/remove for preemption's what-ifs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nodeagent.scheduler.framework import (
    MAX_NODE_SCORE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    NodeInfo,
    PodInfo,
    PreFilterResult,
    Status,
    skip,
    unresolvable,
    unschedulable,
)
from nodeagent.scheduler.framework.topology import PairCounts, bump, count_at, sum_at
from nodeagent.scheduler.plugins.interpodaffinity.counts import RunCounts

NAME = "InterPodAffinity"
R_AFFINITY = "node(s) didn't match pod affinity rules"
R_ANTI = "node(s) didn't match pod anti-affinity rules"
R_EXISTING = "node(s) didn't satisfy existing pods anti-affinity rules"
_REJ_AFF = unresolvable(NAME, R_AFFINITY)
_REJ_ANTI = unschedulable(NAME, R_ANTI)
_REJ_EXISTING = unschedulable(NAME, R_EXISTING)


@dataclasses.dataclass
class Args:
    hard_pod_affinity_weight: int = 1
    ignore_preferred_terms_of_existing_pods: bool = False


def validate(args: Args) -> list[str]:
    if not 0 <= args.hard_pod_affinity_weight <= 100:
        return ["hardPodAffinityWeight must be in [0, 100]"]
    return []


class _State:
    __slots__ = ("existing", "existing_keys", "affinity", "anti", "ns_labels")

    def __init__(self, ns_labels: Any):
        self.existing: PairCounts = {}
        self.affinity: PairCounts = {}
        self.anti: PairCounts = {}
        self.existing_keys: set[str] = set()
        self.ns_labels = ns_labels

    def clone(self) -> _State:
        c = _State(self.ns_labels)
        c.existing, c.affinity, c.anti = dict(self.existing), dict(self.affinity), dict(self.anti)
        c.existing_keys = set(self.existing_keys)
        return c

    def update(self, pod: PodInfo, other: PodInfo, node: NodeInfo, n: int) -> None:
        nsl = self.ns_labels
        for t in other.required_anti_affinity:
            if t.matches(pod, nsl):
                bump(self.existing, t.topology_key, node.labels, n)
                self.existing_keys.add(t.topology_key)
        if pod.required_affinity and all(t.matches(other, nsl) for t in pod.required_affinity):
            for t in pod.required_affinity:
                bump(self.affinity, t.topology_key, node.labels, n)
        for t in pod.required_anti_affinity:
            if t.matches(other, nsl):
                bump(self.anti, t.topology_key, node.labels, n)


class InterPodAffinity:
    name = NAME

    def __init__(self, args: Args, handle: Any):
        self.args = args
        self.handle = handle
        self._counts = RunCounts()

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status | None]:
        snap = self.handle.snapshot
        if not pod.required_affinity and not pod.required_anti_affinity \
                and not snap.any_required_anti_affinity():
            return None, skip(NAME)
        st = _State(self.handle.namespace_labels)
        # the counts of a fresh walk over every node's pods, kept for a run of one shape (counts.py)
        rc = self._counts
        rc.follow(snap, pod, st.ns_labels)
        st.existing, st.affinity, st.anti = dict(rc.existing), dict(rc.affinity), dict(rc.anti)
        st.existing_keys = set(rc.existing_keys)
        state[NAME] = st
        return None, None

    def add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo, node: NodeInfo) -> None:
        st = state.get(NAME)
        if st is not None:
            st.update(pod, to_add, node, 1)

    def remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node: NodeInfo) -> None:
        st = state.get(NAME)
        if st is not None:
            st.update(pod, to_remove, node, -1)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        st: _State | None = state.get(NAME)
        if st is None:
            return None
        labels = node.labels
        if pod.required_affinity:
            fits = True
            for t in pod.required_affinity:
                if not count_at(st.affinity, t.topology_key, labels):
                    fits = False
                    break
            if not fits:
                # the first pod of a group that selects itself may go anywhere its keys exist
                if st.affinity or not all(t.matches(pod, st.ns_labels) for t in pod.required_affinity) \
                        or not all(t.topology_key in labels for t in pod.required_affinity):
                    return _REJ_AFF
        if st.anti:
            for t in pod.required_anti_affinity:
                if count_at(st.anti, t.topology_key, labels):
                    return _REJ_ANTI
        if st.existing:
            for k in st.existing_keys:
                if count_at(st.existing, k, labels):
                    return _REJ_EXISTING
        return None

    def filter_many(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]
                    ) -> tuple[list[NodeInfo], list[tuple[NodeInfo, Status]]]:
        """Filter over a chunk: without required affinity terms of its own, the pod's verdict per node is
        two lookups per topology key, inlined here (count_at per node and key was most of the cycle)."""
        st: _State | None = state.get(NAME)
        if st is None:
            return nodes, []
        if pod.required_affinity:
            passed, failed = [], []
            for n in nodes:
                s = self.filter(state, pod, n)
                if s is None:
                    passed.append(n)
                else:
                    failed.append((n, s))
            return passed, failed
        anti, existing = st.anti, st.existing
        checks = ([(t.topology_key, anti, _REJ_ANTI) for t in pod.required_anti_affinity] if anti else []) \
            + ([(k, existing, _REJ_EXISTING) for k in st.existing_keys] if existing else [])
        if not checks:
            return nodes, []
        passed, failed = [], []
        for n in nodes:
            labels = n.labels
            for key, counts, rej in checks:
                v = labels.get(key)
                if v is not None and counts.get((key, v)):
                    failed.append((n, rej))
                    break
            else:
                passed.append(n)
        return passed, failed

    # -- scoring -------------------------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status | None:
        snap = self.handle.snapshot
        own = bool(pod.preferred_affinity or pod.preferred_anti_affinity)
        candidates = snap.nodes if own else snap.nodes_with_affinity()
        if not own and not candidates:
            return skip(NAME)
        nsl = self.handle.namespace_labels
        hard = self.args.hard_pod_affinity_weight
        ignore_existing_pref = self.args.ignore_preferred_terms_of_existing_pods
        topo: PairCounts = {}
        for ni in candidates:
            if not ni.pods:
                continue
            for ep in ni.pods.values():
                for t in pod.preferred_affinity:
                    if t.matches(ep, nsl):
                        bump(topo, t.topology_key, ni.labels, t.weight)
                for t in pod.preferred_anti_affinity:
                    if t.matches(ep, nsl):
                        bump(topo, t.topology_key, ni.labels, -t.weight)
                if hard:
                    for t in ep.required_affinity:
                        if t.matches(pod, nsl):
                            bump(topo, t.topology_key, ni.labels, hard)
                if not ignore_existing_pref:
                    for t in ep.preferred_affinity:
                        if t.matches(pod, nsl):
                            bump(topo, t.topology_key, ni.labels, t.weight)
                    for t in ep.preferred_anti_affinity:
                        if t.matches(pod, nsl):
                            bump(topo, t.topology_key, ni.labels, -t.weight)
        if not topo:
            return skip(NAME)
        state[NAME + "/score"] = (topo, {k for k, _ in topo})
        return None

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        topo, keys = state[NAME + "/score"]
        return sum_at(topo, keys, node.labels)

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        if not scores:
            return
        lo, hi = min(scores), max(scores)
        diff = hi - lo
        for i, s in enumerate(scores):
            scores[i] = MAX_NODE_SCORE * (s - lo) // diff if diff > 0 else 0

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Pod", ActionType.ALL)),
                ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE_NODE_LABEL))]


def new(args: Args | None, handle: Any) -> InterPodAffinity:
    return InterPodAffinity(args or Args(), handle)

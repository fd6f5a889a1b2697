"""PodTopologySpread: DoNotSchedule constraints filter (skew = matching pods in the node's domain
+ self - global minimum must stay <= maxSkew); ScheduleAnyway constraints, or the system default
constraints for pods selected by a Service/ReplicaSet/StatefulSet, score (fewer matching pods
in the domain = better)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from nodeagent.api.selectors import Requirement, Selector, from_label_selector
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
from nodeagent.scheduler.framework.topology import PairCounts, bump, count_at
from nodeagent.scheduler.framework.types import HOSTNAME_LABEL
from nodeagent.scheduler.plugins.tainttoleration import first_untolerated

NAME = "PodTopologySpread"
R_SKEW = "node(s) didn't match pod topology spread constraints"
R_MISSING = "node(s) didn't match pod topology spread constraints (missing required label)"
_REJ_SKEW = unschedulable(NAME, R_SKEW)
_REJ_MISSING = unresolvable(NAME, R_MISSING)
ZONE_LABEL = "topology.kubernetes.io/zone"
SYSTEM_DEFAULTS = [
    {"maxSkew": 3, "topologyKey": HOSTNAME_LABEL, "whenUnsatisfiable": "ScheduleAnyway"},
    {"maxSkew": 5, "topologyKey": ZONE_LABEL, "whenUnsatisfiable": "ScheduleAnyway"},
]


@dataclasses.dataclass
class Args:
    defaulting_type: str = "System"  # or "List" with default_constraints
    default_constraints: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def validate(args: Args) -> list[str]:
    errs = []
    if args.defaulting_type not in ("System", "List"):
        errs.append(f"defaultingType {args.defaulting_type!r} not in [System, List]")
    for c in args.default_constraints:
        if c.get("labelSelector"):
            errs.append("defaultConstraints[].labelSelector: Forbidden (it comes from the pod's owners)")
        if int(c.get("maxSkew") or 0) <= 0:
            errs.append("defaultConstraints[].maxSkew must be > 0")
    return errs


class Constraint:
    __slots__ = ("max_skew", "key", "hard", "selector", "min_domains", "honor_affinity", "honor_taints")

    def __init__(self, c: dict[str, Any], pod: PodInfo, selector: Selector | None = None):
        self.max_skew = int(c.get("maxSkew") or 1)
        self.key = c.get("topologyKey") or ""
        self.hard = (c.get("whenUnsatisfiable") or "DoNotSchedule") == "DoNotSchedule"
        if selector is None:
            selector = from_label_selector(c.get("labelSelector"))
            extra = [Requirement(k, "In", (pod.labels[k],)) for k in c.get("matchLabelKeys") or ()
                     if k in pod.labels]
            if extra and not selector.empty_matches_nothing:
                selector = Selector(selector.requirements + tuple(extra))
        self.selector = selector
        self.min_domains = int(c.get("minDomains") or 1)
        self.honor_affinity = (c.get("nodeAffinityPolicy") or "Honor") == "Honor"
        self.honor_taints = (c.get("nodeTaintsPolicy") or "Ignore") == "Honor"


def _count(node: NodeInfo, ns: str, sel: Selector) -> int:
    n = 0
    for p in node.pods.values():
        if p.namespace == ns and not p.deleting and sel.matches(p.labels):
            n += 1
    return n


class _FilterState:
    __slots__ = ("constraints", "counts", "domains", "mins")

    def __init__(self, constraints: list[Constraint]):
        self.constraints = constraints
        self.counts: PairCounts = {}
        self.domains: dict[str, set[str]] = {c.key: set() for c in constraints}
        self.mins: dict[str, int] = {}  # global minimum per topology key, recomputed after changes

    def clone(self) -> _FilterState:
        c = _FilterState(self.constraints)
        c.counts = dict(self.counts)
        c.domains = {k: set(v) for k, v in self.domains.items()}
        c.mins = dict(self.mins)
        return c

    def min_match(self, c: Constraint) -> int:
        doms = self.domains[c.key]
        if len(doms) < c.min_domains:
            return 0
        m = self.mins.get(c.key)
        if m is None:
            m = self.mins[c.key] = min((self.counts.get((c.key, v), 0) for v in doms), default=0)
        return m


class PodTopologySpread:
    name = NAME

    def __init__(self, args: Args, handle: Any):
        self.args = args
        self.handle = handle
        self.defaults = SYSTEM_DEFAULTS if args.defaulting_type == "System" else args.default_constraints

    def _included(self, pod: PodInfo, c: Constraint, node: NodeInfo, affinity: Any) -> bool:
        if c.honor_affinity and affinity is not None and not affinity(node):
            return False
        if c.honor_taints and node.filter_taints and first_untolerated(node.filter_taints, pod.tolerations):
            return False
        return True

    def _affinity_matcher(self, pod: PodInfo) -> Any:
        if not pod.node_selector and pod.required_node_terms is None:
            return None
        from nodeagent.scheduler.plugins.nodeaffinity import NodeAffinity

        st = NodeAffinity.__new__(NodeAffinity)
        st.added_required = None
        s = st._state(pod)
        return s.matches if s is not None else None

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status | None]:
        cons = [Constraint(c, pod) for c in pod.spread_constraints
                if (c.get("whenUnsatisfiable") or "DoNotSchedule") == "DoNotSchedule"]
        if not cons:
            return None, skip(NAME)
        st = _FilterState(cons)
        aff = self._affinity_matcher(pod)
        keys = [c.key for c in cons]
        for ni in self.handle.snapshot.nodes:
            labels = ni.labels
            if any(k not in labels for k in keys):
                continue
            for c in cons:
                if not self._included(pod, c, ni, aff):
                    continue
                st.domains[c.key].add(labels[c.key])
                if ni.pods:
                    bump(st.counts, c.key, labels, _count(ni, pod.namespace, c.selector))
        state[NAME] = st
        return None, None

    def _update(self, state: CycleState, pod: PodInfo, other: PodInfo, node: NodeInfo, n: int) -> None:
        st: _FilterState | None = state.get(NAME)
        if st is None or other.namespace != pod.namespace:
            return
        for c in st.constraints:
            v = node.labels.get(c.key)
            if v is not None and v in st.domains[c.key] and c.selector.matches(other.labels):
                bump(st.counts, c.key, node.labels, n)
                st.mins.pop(c.key, None)

    def add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo, node: NodeInfo) -> None:
        self._update(state, pod, to_add, node, 1)

    def remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node: NodeInfo) -> None:
        self._update(state, pod, to_remove, node, -1)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        st: _FilterState | None = state.get(NAME)
        if st is None:
            return None
        for c in st.constraints:
            v = node.labels.get(c.key)
            if v is None:
                return _REJ_MISSING
            self_match = 1 if c.selector.matches(pod.labels) else 0
            if count_at(st.counts, c.key, node.labels) + self_match - st.min_match(c) > c.max_skew:
                return _REJ_SKEW
        return None

    # -- scoring -------------------------------------------------------------------------------------

    def _soft_constraints(self, pod: PodInfo) -> list[Constraint]:
        if pod.spread_constraints:
            return [Constraint(c, pod) for c in pod.spread_constraints
                    if c.get("whenUnsatisfiable") == "ScheduleAnyway"]
        sels = self.handle.owner_selectors(pod) if self.defaults else []
        if not sels:
            return []
        reqs: tuple[Requirement, ...] = ()
        for s in sels:
            reqs += s.requirements
        sel = Selector(reqs)
        return [Constraint(c, pod, sel) for c in self.defaults]

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status | None:
        cons = self._soft_constraints(pod)
        if not cons:
            return skip(NAME)
        require_all = bool(pod.spread_constraints)  # system defaults tolerate missing labels
        keys = [c.key for c in cons]
        ignored = set()
        domains: dict[str, set[str]] = {k: set() for k in keys}
        for n in nodes:
            if require_all and any(k not in n.labels for k in keys):
                ignored.add(n.name)
                continue
            for k in keys:
                v = n.labels.get(k)
                if v is not None:
                    domains[k].add(v)
        counts: PairCounts = {}
        aff = self._affinity_matcher(pod)
        for c in cons:
            if c.key == HOSTNAME_LABEL:
                continue  # counted per node at score time
            for ni in self.handle.snapshot.nodes:
                v = ni.labels.get(c.key)
                if v is None or v not in domains[c.key] or not ni.pods or not self._included(pod, c, ni, aff):
                    continue
                bump(counts, c.key, ni.labels, _count(ni, pod.namespace, c.selector))
        weights = [math.log(len(domains[c.key]) + 2) if c.key != HOSTNAME_LABEL
                   else math.log(len(nodes) - len(ignored) + 2) for c in cons]
        state[NAME + "/score"] = (cons, counts, weights, ignored)
        return None

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        cons, counts, weights, ignored = state[NAME + "/score"]
        if node.name in ignored:
            return 0
        s = 0.0
        for c, w in zip(cons, weights, strict=True):
            v = node.labels.get(c.key)
            if v is None:
                continue
            cnt = (_count(node, pod.namespace, c.selector) if c.key == HOSTNAME_LABEL
                   else count_at(counts, c.key, node.labels))
            s += cnt * w + (c.max_skew - 1)
        return round(s)

    def score_many(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[int]:
        raw = [self.score(state, pod, n) for n in nodes]
        ignored = state[NAME + "/score"][3]
        # stash which indexes are ignored for normalize (it sees only the list)
        state[NAME + "/ignored"] = [n.name in ignored for n in nodes]
        return raw

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        ign = state.get(NAME + "/ignored") or [False] * len(scores)
        live = [s for s, i in zip(scores, ign, strict=True) if not i]
        if not live:
            return
        lo, hi = min(live), max(live)
        for i, s in enumerate(scores):
            if ign[i]:
                scores[i] = 0
            elif hi == 0:
                scores[i] = MAX_NODE_SCORE
            else:
                scores[i] = MAX_NODE_SCORE * (hi + lo - s) // hi

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Pod", ActionType.ALL)),
                ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD | ActionType.DELETE
                                                  | ActionType.UPDATE_NODE_LABEL
                                                  | ActionType.UPDATE_NODE_TAINT))]


def new(args: Args | None, handle: Any) -> PodTopologySpread:
    return PodTopologySpread(args or Args(), handle)

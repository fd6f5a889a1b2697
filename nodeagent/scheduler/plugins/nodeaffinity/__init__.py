"""NodeAffinity: Filter on spec.nodeSelector and required node affinity (terms ORed, expressions
ANDed); Score sums the weights of matching preferred terms (normalized so the best node is 100).

The filter's verdict is a function of the node's labels and name alone, and pods come in runs of one
shape (a Deployment's replicas): the verdicts of the last shape are kept per node while the node's labels
are the same object (NodeInfo.set_node replaces them on every node update), so a run of pods matches
each node's labels once, not once per pod.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

import orjson

from nodeagent.api.selectors import Selector, from_node_selector_term
from nodeagent.scheduler.framework import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    NodeInfo,
    PodInfo,
    PreFilterResult,
    Status,
    default_normalize,
    skip,
    unresolvable,
)

NAME = "NodeAffinity"
REASON = "node(s) didn't match Pod's node affinity/selector"
_REJECT = unresolvable(NAME, REASON)
_MAX_VERDICTS = 100_000  # names of nodes deleted during a run of one shape stay until then


@dataclasses.dataclass
class Args:
    added_affinity: dict[str, Any] | None = None  # a NodeAffinity every pod of the profile must also satisfy


def validate(args: Args) -> list[str]:
    try:
        _Terms.required_of(args.added_affinity or {})
    except (KeyError, TypeError, ValueError) as e:
        return [f"addedAffinity: {e}"]
    return []


class _Terms:
    """Parsed NodeSelectorTerms: ORed (label selector, field selector) pairs; an empty term matches
    nothing."""

    __slots__ = ("terms",)

    def __init__(self, terms: Any):
        self.terms: list[tuple[Selector, Selector]] = []
        for t in terms or ():
            if not t.get("matchExpressions") and not t.get("matchFields"):
                continue
            self.terms.append(from_node_selector_term(t))

    def matches(self, node: NodeInfo) -> bool:
        for lsel, fsel in self.terms:
            if lsel.matches(node.labels) and (not fsel.requirements
                                              or fsel.matches({"metadata.name": node.name})):
                return True
        return False

    @staticmethod
    def required_of(affinity: dict[str, Any]) -> _Terms | None:
        req = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        return _Terms(req.get("nodeSelectorTerms")) if req else None


class _State:
    __slots__ = ("selector", "required", "added", "shape")

    def __init__(self, selector: dict[str, str], required: _Terms | None, added: _Terms | None,
                 shape: Hashable):
        self.selector = tuple(selector.items())
        self.required = required
        self.added = added
        self.shape = shape  # equal shapes give equal verdicts on every node

    def matches(self, node: NodeInfo) -> bool:
        labels = node.labels
        for k, v in self.selector:
            if labels.get(k) != v:
                return False
        if self.required is not None and not self.required.matches(node):
            return False
        return self.added is None or self.added.matches(node)


def _names_from_fields(terms: Any) -> set[str] | None:
    names: set[str] = set()
    for t in terms or ():
        got = None
        for f in t.get("matchFields") or ():
            if f.get("key") == "metadata.name" and f.get("operator") == "In":
                got = set(f.get("values") or ())
        if got is None:
            return None
        names |= got
    return names


class NodeAffinity:
    name = NAME
    pod_dependent = False  # the verdict depends on the node alone: pod what-ifs cannot change it

    def __init__(self, args: Args):
        aa = args.added_affinity or {}
        self.added_required = _Terms.required_of(aa)
        self.added_preferred = [(int(p.get("weight") or 0), _Terms([p.get("preference") or {}]))
                                for p in aa.get("preferredDuringSchedulingIgnoredDuringExecution") or ()]
        # the last shape's verdicts: node name -> (the labels they were computed on, verdict)
        self._shape: Hashable = None
        self._verdicts: dict[str, tuple[dict[str, str], bool]] = {}

    def _state(self, pod: PodInfo) -> _State | None:
        req = _Terms(pod.required_node_terms) if pod.required_node_terms is not None else None
        if not pod.node_selector and req is None and self.added_required is None:
            return None
        shape = (tuple(sorted(pod.node_selector.items())),
                 None if req is None else orjson.dumps(pod.required_node_terms, option=orjson.OPT_SORT_KEYS))
        return _State(pod.node_selector, req, self.added_required, shape)

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status | None]:
        st = self._state(pod)
        if st is None:
            return None, skip(NAME)
        state[NAME] = st
        if pod.required_node_terms:
            names = _names_from_fields(pod.required_node_terms)
            if names is not None:
                return PreFilterResult(names), None
        return None, None

    def filter_shape(self, pod: PodInfo) -> Hashable:
        """The verdict is a pure function of the node (labels, name) and this (the cycle memo's key)."""
        st = self._state(pod)
        return () if st is None else st.shape

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        st = state.get(NAME) or self._state(pod)
        if st is None or st.matches(node):
            return None
        return _REJECT

    def filter_many(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]
                    ) -> tuple[list[NodeInfo], list[tuple[NodeInfo, Status]]]:
        st = state.get(NAME) or self._state(pod)
        if st is None:
            return nodes, []
        if st.shape != self._shape or len(self._verdicts) > _MAX_VERDICTS:
            self._shape, self._verdicts = st.shape, {}
        verdicts = self._verdicts
        m = st.matches
        passed, failed = [], []
        for n in nodes:
            v = verdicts.get(n.name)
            if v is not None and v[0] is n.labels:
                ok = v[1]
            else:
                ok = m(n)
                verdicts[n.name] = (n.labels, ok)
            if ok:
                passed.append(n)
            else:
                failed.append((n, _REJECT))
        return passed, failed

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status | None:
        prefs = [(int(p.get("weight") or 0), _Terms([p.get("preference") or {}]))
                 for p in pod.preferred_node_terms]
        prefs += self.added_preferred
        if not prefs:
            return skip(NAME)
        state[NAME + "/score"] = prefs
        return None

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        prefs = state.get(NAME + "/score") or []
        return sum(w for w, t in prefs if t.matches(node))

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        default_normalize(scores)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE_NODE_LABEL))]


def new(args: Args | None, handle: Any) -> NodeAffinity:
    return NodeAffinity(args or Args())

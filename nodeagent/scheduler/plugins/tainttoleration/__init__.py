"""TaintToleration: Filter rejects untolerated NoSchedule/NoExecute taints; Score prefers nodes with
fewer untolerated PreferNoSchedule taints (normalized in reverse: fewest = 100)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from nodeagent.api.taints import tolerates
from nodeagent.scheduler.framework import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    NodeInfo,
    PodInfo,
    Status,
    default_normalize,
    skip,
    unresolvable,
)

NAME = "TaintToleration"


def first_untolerated(taints: Iterable[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]
                      ) -> Mapping[str, Any] | None:
    for t in taints:
        if not any(tolerates(tol, t) for tol in tolerations):
            return t
    return None


def tolerations_shape(pod: PodInfo) -> tuple[Any, ...]:
    """The pod's tolerations as a comparable value: what a taint verdict depends on besides the node."""
    return tuple(tuple(sorted(t.items())) for t in pod.tolerations)


def taint_reason(t: Mapping[str, Any]) -> str:
    return f"node(s) had untolerated taint {{{t.get('key', '')}: {t.get('value', '')}}}"


class TaintToleration:
    name = NAME
    pod_dependent = False  # the verdict depends on the node alone: pod what-ifs cannot change it

    def __init__(self, handle: Any = None) -> None:
        self.handle = handle
        self._reasons: dict[str, Status] = {}

    def _reject(self, t: Mapping[str, Any]) -> Status:
        r = taint_reason(t)
        s = self._reasons.get(r)
        if s is None:
            s = self._reasons[r] = unresolvable(NAME, r)
        return s

    def filter_shape(self, pod: PodInfo) -> Hashable:
        """The verdict is a pure function of the NodeInfo and this (the cycle memo's key)."""
        return tolerations_shape(pod)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        if not node.filter_taints:
            return None
        t = first_untolerated(node.filter_taints, pod.tolerations)
        return None if t is None else self._reject(t)

    def filter_many(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]
                    ) -> tuple[list[NodeInfo], list[tuple[NodeInfo, Status]]]:
        snap = getattr(self.handle, "snapshot", None)
        if snap is not None and not snap.any_filter_taints:
            return nodes, []
        passed, failed = [], []
        tols = pod.tolerations
        for n in nodes:
            if not n.filter_taints:
                passed.append(n)
                continue
            t = first_untolerated(n.filter_taints, tols)
            if t is None:
                passed.append(n)
            else:
                failed.append((n, self._reject(t)))
        return passed, failed

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status | None:
        snap = getattr(self.handle, "snapshot", None)
        if snap is not None and not snap.any_prefer_taints:
            return skip(NAME)  # every node would score the same (100): skipping can't change the choice
        state[NAME] = [t for t in pod.tolerations
                       if (t.get("effect") or "PreferNoSchedule") == "PreferNoSchedule"]
        return None

    def score_many(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[int]:
        tols = state.get(NAME, pod.tolerations)
        return [sum(1 for t in n.prefer_taints if not any(tolerates(x, t) for x in tols))
                if n.prefer_taints else 0 for n in nodes]

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return self.score_many(state, pod, [node])[0]

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        default_normalize(scores, reverse=True)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE_NODE_TAINT))]


def new(args: None, handle: Any) -> TaintToleration:
    return TaintToleration(handle)

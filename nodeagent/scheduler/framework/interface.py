"""Extension points as small Protocols, the per-cycle CycleState, and cluster events.

A plugin implements any subset of these; the framework registers it at every point whose
method it has (like kube-scheduler's multiPoint). Filter/Score have optional batch forms
(`filter_many`, `score_many`) the framework prefers: one Python call per plugin per chunk of
nodes instead of one per node, which is what makes thousands of nodes affordable.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Hashable
from typing import Any, Protocol, runtime_checkable

from nodeagent.scheduler.framework.status import Status
from nodeagent.scheduler.framework.types import NodeInfo, PodInfo, QueuedPodInfo

MAX_NODE_SCORE = 100


class CycleState(dict):
    """Per-pod, per-cycle data keyed by plugin name; values with `.clone()` are cloned for what-ifs."""

    __slots__ = ("skip_filter", "skip_score")

    def __init__(self) -> None:
        super().__init__()
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()

    def clone(self) -> CycleState:
        c = CycleState()
        for k, v in self.items():
            c[k] = v.clone() if hasattr(v, "clone") else v
        c.skip_filter = set(self.skip_filter)
        c.skip_score = set(self.skip_score)
        return c


class ActionType(enum.IntFlag):
    ADD = 1
    DELETE = 2
    UPDATE_NODE_ALLOCATABLE = 4
    UPDATE_NODE_LABEL = 8
    UPDATE_NODE_TAINT = 16
    UPDATE_NODE_CONDITION = 32
    UPDATE_NODE_ANNOTATION = 64
    UPDATE_POD_LABEL = 128
    UPDATE_POD_SCALE_DOWN = 256
    UPDATE_POD_OTHER = 512
    UPDATE = 4 | 8 | 16 | 32 | 64 | 128 | 256 | 512
    ALL = ADD | DELETE | UPDATE


@dataclasses.dataclass(frozen=True)
class ClusterEvent:
    """(resource, actions): "Node"/"Pod" (assigned pods)/"PodDisruptionBudget"/"Namespace"/..."""
    resource: str
    action: ActionType
    label: str = ""

    def covers(self, other: ClusterEvent) -> bool:
        return (self.resource == other.resource or self.resource == "*") and bool(self.action & other.action)


# Queueing hint: (pod, old_obj, new_obj) -> True to requeue the pod for this event.
QueueingHint = Callable[[PodInfo, Any, Any], bool]


@dataclasses.dataclass(frozen=True)
class ClusterEventWithHint:
    event: ClusterEvent
    hint: QueueingHint | None = None


@dataclasses.dataclass
class PreFilterResult:
    """Node names a PreFilter already knows are the only candidates (None = all)."""
    node_names: set[str] | None = None
    plugins: tuple[str, ...] = ()  # which PreFilters narrowed the set (for the rejection message)


@dataclasses.dataclass
class PostFilterResult:
    nominated_node_name: str = ""


@runtime_checkable
class Plugin(Protocol):
    name: str


class QueueSortPlugin(Protocol):
    def sort_key(self, qp: QueuedPodInfo) -> tuple[Any, ...]: ...


class PreEnqueuePlugin(Protocol):
    def pre_enqueue(self, pod: PodInfo) -> Status | None: ...


class EnqueueExtensions(Protocol):
    def events_to_register(self) -> list[ClusterEventWithHint]: ...


class PreFilterPlugin(Protocol):
    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status | None]: ...


class PreFilterExtensions(Protocol):
    """Keep PreFilter state consistent when preemption adds/removes pods on a node."""
    def add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo, node: NodeInfo) -> None: ...
    def remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node: NodeInfo) -> None: ...


class FilterPlugin(Protocol):
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None: ...


class BatchFilterPlugin(Protocol):
    def filter_many(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]
                    ) -> tuple[list[NodeInfo], list[tuple[NodeInfo, Status]]]: ...


class FilterShapePlugin(Protocol):
    """A filter whose verdict on a node is a pure function of the NodeInfo and of what this returns for
    the pod (None: not for this pod): the scheduler keeps verdicts per node for that shape (cyclememo.py).
    Filters that read other nodes, API objects or cluster-wide state must not have it."""
    def filter_shape(self, pod: PodInfo) -> Hashable: ...


class PostFilterPlugin(Protocol):
    def post_filter(self, state: CycleState, pod: PodInfo, statuses: dict[str, Status]
                    ) -> tuple[PostFilterResult | None, Status | None]: ...


class PreScorePlugin(Protocol):
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status | None: ...


class ScorePlugin(Protocol):
    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int: ...


class BatchScorePlugin(Protocol):
    def score_many(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[int]: ...


class ScoreShapePlugin(Protocol):
    """A score plugin whose score of a pod on a node is a pure function of the NodeInfo (its generation)
    and of what this returns for the pod: the framework keeps the weighted totals per node for that shape.
    None: not for this pod. Plugins with normalize_score or cluster-wide inputs must not have it."""
    def score_shape(self, pod: PodInfo) -> Hashable: ...


class ScoreExtensions(Protocol):
    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None: ...


class ReservePlugin(Protocol):
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None: ...
    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None: ...


class PermitPlugin(Protocol):
    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status | None, float]: ...


class PreBindPlugin(Protocol):
    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None: ...


class BindPlugin(Protocol):
    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None: ...


class PostBindPlugin(Protocol):
    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None: ...


def default_normalize(scores: list[int], reverse: bool = False) -> None:
    """kube-scheduler's DefaultNormalizeScore: scale so the best is 100 (or flip with reverse)."""
    m = max(scores, default=0)
    if m == 0:
        if reverse:
            scores[:] = [MAX_NODE_SCORE] * len(scores)
        return
    for i, s in enumerate(scores):
        s = MAX_NODE_SCORE * s // m
        scores[i] = MAX_NODE_SCORE - s if reverse else s

"""NodeResourcesBalancedAllocation: prefer nodes whose cpu and memory fractions stay close to each
other after placing the pod: score = (1 - standard deviation of the fractions) * 100."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable
from typing import Any

from nodeagent.scheduler.framework import (
    MAX_NODE_SCORE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    NodeInfo,
    PodInfo,
    Status,
    skip,
)
from nodeagent.scheduler.framework.scorecache import NodeScoreCache

NAME = "NodeResourcesBalancedAllocation"


@dataclasses.dataclass
class Args:
    resources: list[dict[str, Any]] = dataclasses.field(
        default_factory=lambda: [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}])


def validate(args: Args) -> list[str]:
    return [f"resources[{i}]: name is required" for i, r in enumerate(args.resources) if not r.get("name")]


def _get(n: NodeInfo | PodInfo, name: str, alloc: bool = False) -> int:
    if isinstance(n, NodeInfo):
        if alloc:
            return {"cpu": n.alloc_cpu, "memory": n.alloc_mem, "ephemeral-storage": n.alloc_eph}.get(
                name, n.alloc_scalar.get(name, 0))
        return {"cpu": n.req_cpu, "memory": n.req_mem, "ephemeral-storage": n.req_eph}.get(
            name, n.req_scalar.get(name, 0))
    return {"cpu": n.req_cpu, "memory": n.req_mem, "ephemeral-storage": n.req_eph}.get(
        name, n.req_scalar.get(name, 0))


class BalancedAllocation:
    name = NAME

    def __init__(self, args: Args):
        self.resources = [r["name"] for r in args.resources]
        self.cpu_mem = self.resources == ["cpu", "memory"]
        self._cache = NodeScoreCache()  # the cpu/memory fast path's scores, per node, for one pod shape

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status | None:
        if not any(_get(pod, r) for r in self.resources):
            return skip(NAME)  # a best-effort pod doesn't change any node's balance
        return None

    def score_many(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[int]:
        if not self.cpu_mem:
            return [self.score(state, pod, n) for n in nodes]
        pc, pm = pod.req_cpu, pod.req_mem

        def compute(nodes: list[NodeInfo]) -> list[int]:
            try:  # (1 - std) * 100 with std = |fcpu - fmem| / 2, fractions capped at 1
                return [int((1 - abs((fc if (fc := (n.req_cpu + pc) / n.alloc_cpu) < 1 else 1.0)
                                     - (fm if (fm := (n.req_mem + pm) / n.alloc_mem) < 1 else 1.0)) / 2)
                            * MAX_NODE_SCORE)
                        for n in nodes]
            except ZeroDivisionError:  # a node without cpu or memory: the general path skips that resource
                return [self.score(state, pod, n) for n in nodes]
        return self._cache.scores((pc, pm), nodes, compute)

    def score_shape(self, pod: PodInfo) -> Hashable:
        """What the pod's score depends on besides the NodeInfo: run_score keeps totals per node for it."""
        return (pod.req_cpu, pod.req_mem, pod.req_eph, tuple(sorted(pod.req_scalar.items())))

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        fracs = []
        for r in self.resources:
            alloc = _get(node, r, alloc=True)
            if not alloc:
                continue
            fracs.append(min(1.0, (_get(node, r) + _get(pod, r)) / alloc))
        if len(fracs) < 2:
            return MAX_NODE_SCORE
        if len(fracs) == 2:
            std = abs(fracs[0] - fracs[1]) / 2
        else:
            mean = sum(fracs) / len(fracs)
            std = math.sqrt(sum((f - mean) ** 2 for f in fracs) / len(fracs))
        return int((1 - std) * MAX_NODE_SCORE)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Pod", ActionType.DELETE)),
                ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD
                                                  | ActionType.UPDATE_NODE_ALLOCATABLE))]


def new(args: Args | None, handle: Any) -> BalancedAllocation:
    return BalancedAllocation(args or Args())

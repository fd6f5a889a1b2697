"""NodeResourcesFit: Filter on requests vs allocatable (cpu, memory, ephemeral-storage, pod count,
extended resources); Score by LeastAllocated (default) or MostAllocated over weighted resources.

Requests are the pod's effective requests (init containers counted as max(max init, sum app) +
overhead, see framework.types.pod_requests). Scoring uses the non-zero requests (100m / 200Mi
for containers that request nothing), as kube-scheduler does, so empty pods still spread.
"""

from __future__ import annotations

import dataclasses
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
    PreFilterResult,
    Status,
    unschedulable,
)
from nodeagent.scheduler.framework.scorecache import NodeScoreCache

NAME = "NodeResourcesFit"
STRATEGIES = ("LeastAllocated", "MostAllocated")


@dataclasses.dataclass
class Args:
    ignored_resources: list[str] = dataclasses.field(default_factory=list)
    ignored_resource_groups: list[str] = dataclasses.field(default_factory=list)
    scoring_strategy: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {"type": "LeastAllocated",
                                 "resources": [{"name": "cpu", "weight": 1},
                                               {"name": "memory", "weight": 1}]})


def validate(args: Args) -> list[str]:
    errs = []
    st = args.scoring_strategy or {}
    if st.get("type", "LeastAllocated") not in STRATEGIES:
        errs.append(f"scoringStrategy.type: {st.get('type')!r} not in {list(STRATEGIES)}")
    for r in st.get("resources") or ():
        if not r.get("name"):
            errs.append("scoringStrategy.resources: name is required")
        if not 1 <= int(r.get("weight", 1)) <= 100:
            errs.append(f"scoringStrategy.resources[{r.get('name')}].weight must be in [1, 100]")
    return errs


def _node_alloc(n: NodeInfo, name: str) -> int:
    if name == "cpu":
        return n.alloc_cpu
    if name == "memory":
        return n.alloc_mem
    if name == "ephemeral-storage":
        return n.alloc_eph
    return n.alloc_scalar.get(name, 0)


def _node_req(n: NodeInfo, name: str) -> int:
    if name == "cpu":
        return n.nz_cpu
    if name == "memory":
        return n.nz_mem
    if name == "ephemeral-storage":
        return n.req_eph
    return n.req_scalar.get(name, 0)


def _pod_req(p: PodInfo, name: str) -> int:
    if name == "cpu":
        return p.nz_cpu
    if name == "memory":
        return p.nz_mem
    if name == "ephemeral-storage":
        return p.req_eph
    return p.req_scalar.get(name, 0)


class NodeResourcesFit:
    name = NAME

    def __init__(self, args: Args):
        self.ignored = set(args.ignored_resources)
        self.ignored_groups = set(args.ignored_resource_groups)
        st = args.scoring_strategy or {}
        self.most = st.get("type", "LeastAllocated") == "MostAllocated"
        self.resources = [(r["name"], int(r.get("weight", 1)))
                          for r in st.get("resources") or [{"name": "cpu"}, {"name": "memory"}]]
        self.default_resources = [n for n, w in self.resources] == ["cpu", "memory"] and \
            all(w == 1 for _, w in self.resources)
        self._status: dict[tuple[str, ...], Status] = {}
        self._score_cache = NodeScoreCache()  # LeastAllocated's scores, per node, for one pod shape
        names = ("Too many pods", "Insufficient cpu", "Insufficient memory", "Insufficient ephemeral-storage")
        # the status for each combination of failed checks (bit i: names[i]); none when all pass
        self._by_bits: list[Status | None] = [None] + [
            self._reject(tuple(r for i, r in enumerate(names) if b & (1 << i))) for b in range(1, 16)]

    def _scalars(self, pod: PodInfo) -> list[tuple[str, int]]:
        out = []
        for k, v in pod.req_scalar.items():
            if k in self.ignored or (("/" in k) and k.split("/", 1)[0] in self.ignored_groups):
                continue
            out.append((k, v))
        return out

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status | None]:
        state[NAME] = self._scalars(pod) if pod.req_scalar else ()
        return None, None

    def insufficient(self, pod: PodInfo, n: NodeInfo, scalars: Any) -> tuple[str, ...]:
        reasons = []
        if len(n.pods) + 1 > n.alloc_pods:
            reasons.append("Too many pods")
        if pod.req_cpu and pod.req_cpu > n.alloc_cpu - n.req_cpu:
            reasons.append("Insufficient cpu")
        if pod.req_mem and pod.req_mem > n.alloc_mem - n.req_mem:
            reasons.append("Insufficient memory")
        if pod.req_eph and pod.req_eph > n.alloc_eph - n.req_eph:
            reasons.append("Insufficient ephemeral-storage")
        for k, v in scalars:
            if v > n.alloc_scalar.get(k, 0) - n.req_scalar.get(k, 0):
                reasons.append(f"Insufficient {k}")
        return tuple(reasons)

    def _reject(self, reasons: tuple[str, ...]) -> Status:
        s = self._status.get(reasons)
        if s is None:
            s = self._status[reasons] = unschedulable(NAME, *reasons)
        return s

    def filter_shape(self, pod: PodInfo) -> Hashable:
        """The verdict is a pure function of the NodeInfo and this (the cycle memo's key)."""
        return (pod.req_cpu, pod.req_mem, pod.req_eph, tuple(sorted(pod.req_scalar.items())))

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        scalars = state.get(NAME)
        if scalars is None:
            scalars = self._scalars(pod)
        reasons = self.insufficient(pod, node, scalars)
        return self._reject(reasons) if reasons else None

    def filter_many(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]
                    ) -> tuple[list[NodeInfo], list[tuple[NodeInfo, Status]]]:
        scalars = state.get(NAME)
        if scalars is None:
            scalars = self._scalars(pod)
        cpu, mem, eph = pod.req_cpu, pod.req_mem, pod.req_eph
        if not scalars:  # the common case first: every node fits (one pass over NodeInfo's free_* fields)
            if eph:
                passed = [n for n in nodes if n.free_cpu >= cpu and n.free_mem >= mem and n.free_pods > 0
                          and n.free_eph >= eph]
            else:
                passed = [n for n in nodes if n.free_cpu >= cpu and n.free_mem >= mem and n.free_pods > 0]
            if len(passed) == len(nodes):
                return passed, []
        failed = []
        passed = []
        if scalars:
            for n in nodes:
                reasons = self.insufficient(pod, n, scalars)
                if reasons:
                    failed.append((n, self._reject(reasons)))
                else:
                    passed.append(n)
            return passed, failed
        # the common case inlined: one status per distinct combination of the four checks
        by_bits = self._by_bits
        for n in nodes:
            bits = ((n.free_pods <= 0) | ((cpu > 0 and cpu > n.free_cpu) << 1)
                    | ((mem > 0 and mem > n.free_mem) << 2) | ((eph > 0 and eph > n.free_eph) << 3))
            status = by_bits[bits]
            if status is None:
                passed.append(n)
            else:
                failed.append((n, status))
        return passed, failed

    def filter_with_delta(self, state: CycleState, pod: PodInfo, node: NodeInfo,
                          dpods: int, dcpu: int, dmem: int, deph: int) -> Status | None:
        """Filter as if the node's pod count and requests changed by the deltas: preemption's
        what-if arithmetic, without adding or removing pods. Only for pods without extended
        resources (callers fall back to Filter otherwise)."""
        cpu, mem, eph = pod.req_cpu, pod.req_mem, pod.req_eph
        bits = ((len(node.pods) + dpods >= node.alloc_pods)
                | ((cpu > 0 and cpu > node.alloc_cpu - node.req_cpu - dcpu) << 1)
                | ((mem > 0 and mem > node.alloc_mem - node.req_mem - dmem) << 2)
                | ((eph > 0 and eph > node.alloc_eph - node.req_eph - deph) << 3))
        return self._by_bits[bits] if bits else None

    def score_many(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[int]:
        if self.default_resources:
            pc, pm = pod.nz_cpu, pod.nz_mem
            if self.most:
                return [((min(n.nz_cpu + pc, n.alloc_cpu) * 100 // n.alloc_cpu if n.alloc_cpu else 0)
                         + (min(n.nz_mem + pm, n.alloc_mem) * 100 // n.alloc_mem if n.alloc_mem else 0)) // 2
                        for n in nodes]

            def compute(nodes: list[NodeInfo]) -> list[int]:
                return [(((ac - rc) * 100 // ac if (rc := n.nz_cpu + pc) <= (ac := n.alloc_cpu) and ac else 0)
                         + ((am - rm) * 100 // am
                            if (rm := n.nz_mem + pm) <= (am := n.alloc_mem) and am else 0)) // 2
                        for n in nodes]
            return self._score_cache.scores((pc, pm), nodes, compute)
        return [self.score(state, pod, n) for n in nodes]

    def score_shape(self, pod: PodInfo) -> Hashable:
        """What the pod's score depends on besides the NodeInfo: run_score keeps totals per node for it."""
        return (pod.nz_cpu, pod.nz_mem, pod.req_eph, tuple(sorted(pod.req_scalar.items())))

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        total = wsum = 0
        for name, w in self.resources:
            alloc = _node_alloc(node, name)
            req = _node_req(node, name) + _pod_req(pod, name)
            if alloc == 0:
                continue  # a resource the node doesn't have is left out of the average
            if self.most:
                s = min(req, alloc) * MAX_NODE_SCORE // alloc
            else:
                s = (alloc - req) * MAX_NODE_SCORE // alloc if req <= alloc else 0
            total += s * w
            wsum += w
        return total // wsum if wsum else 0

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Pod", ActionType.DELETE
                                                  | ActionType.UPDATE_POD_SCALE_DOWN)),
                ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD
                                                  | ActionType.UPDATE_NODE_ALLOCATABLE))]


def new(args: Args | None, handle: Any) -> NodeResourcesFit:
    return NodeResourcesFit(args or Args())

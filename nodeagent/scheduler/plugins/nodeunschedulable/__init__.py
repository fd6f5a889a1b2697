"""NodeUnschedulable: cordoned nodes (spec.unschedulable) take only pods tolerating the
node.kubernetes.io/unschedulable:NoSchedule taint."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from nodeagent.scheduler.framework import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    NodeInfo,
    PodInfo,
    Status,
    unresolvable,
)
from nodeagent.scheduler.plugins.tainttoleration import tolerates, tolerations_shape

NAME = "NodeUnschedulable"
REASON = "node(s) were unschedulable"
_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
_REJECT = unresolvable(NAME, REASON)


class NodeUnschedulable:
    name = NAME
    pod_dependent = False  # the verdict depends on the node alone: pod what-ifs cannot change it

    def filter_shape(self, pod: PodInfo) -> Hashable:
        """The verdict is a pure function of the NodeInfo and this (the cycle memo's key)."""
        return tolerations_shape(pod)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        if not node.unschedulable or any(tolerates(t, _TAINT) for t in pod.tolerations):
            return None
        return _REJECT

    def __init__(self, handle: Any = None):
        self.handle = handle

    def filter_many(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]
                    ) -> tuple[list[NodeInfo], list[tuple[NodeInfo, Status]]]:
        snap = getattr(self.handle, "snapshot", None)
        if snap is not None and not snap.any_unschedulable:
            return nodes, []
        if any(tolerates(t, _TAINT) for t in pod.tolerations):
            return nodes, []
        passed = [n for n in nodes if not n.unschedulable]
        if len(passed) == len(nodes):
            return passed, []
        return passed, [(n, _REJECT) for n in nodes if n.unschedulable]

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE_NODE_TAINT))]


def new(args: None, handle: Any) -> NodeUnschedulable:
    return NodeUnschedulable(handle)

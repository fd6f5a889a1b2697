"""NodeName: a pod that names a node (spec.nodeName) fits only that node."""

from __future__ import annotations

from typing import Any

from nodeagent.scheduler.framework import (
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
)

NAME = "NodeName"
REASON = "node(s) didn't match the requested node name"
_REJECT = unresolvable(NAME, REASON)


class NodeName:
    name = NAME
    pod_dependent = False  # the verdict depends on the node alone: pod what-ifs cannot change it

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status | None]:
        if not pod.node_name:
            return None, skip(NAME)
        return None, None

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        if not pod.node_name or pod.node_name == node.name:
            return None
        return _REJECT

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD))]


def new(args: None, handle: Any) -> NodeName:
    return NodeName()

"""NodePorts: a pod's hostPorts must be free on the node (same protocol and port, overlapping IP)."""

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
    unschedulable,
)

NAME = "NodePorts"
REASON = "node(s) didn't have free ports for the requested pod ports"
_REJECT = unschedulable(NAME, REASON)


class NodePorts:
    name = NAME

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status | None]:
        if not pod.host_ports:
            return None, skip(NAME)
        return None, None

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        if pod.host_ports and node.used_ports and node.ports_conflict(pod.host_ports):
            return _REJECT
        return None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Pod", ActionType.DELETE)),
                ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD))]


def new(args: None, handle: Any) -> NodePorts:
    return NodePorts()

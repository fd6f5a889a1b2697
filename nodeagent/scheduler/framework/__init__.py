"""The scheduling framework: statuses, parsed pod/node views, extension points, and the runtime."""

from nodeagent.scheduler.framework.interface import (
    MAX_NODE_SCORE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    PostFilterResult,
    PreFilterResult,
    default_normalize,
)
from nodeagent.scheduler.framework.status import Code, FitError, Status, ok, skip, unresolvable, unschedulable
from nodeagent.scheduler.framework.types import NodeInfo, PodInfo

__all__ = ["MAX_NODE_SCORE", "ActionType", "ClusterEvent", "ClusterEventWithHint", "Code", "CycleState",
           "FitError", "NodeInfo", "PodInfo", "PostFilterResult", "PreFilterResult", "Status",
           "default_normalize", "ok", "skip", "unresolvable", "unschedulable"]

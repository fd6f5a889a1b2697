"""SchedulingGates (PreEnqueue): a pod with spec.schedulingGates stays out of activeQ until they are gone."""

from __future__ import annotations

from typing import Any

from nodeagent.scheduler.framework import PodInfo, Status, unresolvable

NAME = "SchedulingGates"


class SchedulingGates:
    name = NAME

    def pre_enqueue(self, pod: PodInfo) -> Status | None:
        if not pod.scheduling_gates:
            return None
        return unresolvable(NAME, f"waiting for scheduling gates: [{' '.join(pod.scheduling_gates)}]")


def new(args: None, handle: Any) -> SchedulingGates:
    return SchedulingGates()

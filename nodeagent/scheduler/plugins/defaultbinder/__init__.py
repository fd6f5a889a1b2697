"""DefaultBinder (Bind): POST pods/<name>/binding through the scheduler's Binder."""

from __future__ import annotations

from typing import Any

from nodeagent.scheduler.framework import CycleState, PodInfo, Status

NAME = "DefaultBinder"


class DefaultBinder:
    name = NAME

    def __init__(self, handle: Any):
        self.handle = handle

    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        await self.handle.api.binder.bind(pod.namespace, pod.name, pod.uid, node_name)
        return None


def new(args: None, handle: Any) -> DefaultBinder:
    return DefaultBinder(handle)

"""PrioritySort (QueueSort): higher priority first, then earlier arrival in the queue."""

from __future__ import annotations

from typing import Any

NAME = "PrioritySort"


class PrioritySort:
    name = NAME

    def sort_key(self, qp: Any) -> tuple[int, float]:
        return (-qp.pod_info.priority, qp.timestamp)


def new(args: None, handle: Any) -> PrioritySort:
    return PrioritySort()

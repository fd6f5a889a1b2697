"""ImageLocality: prefer nodes that already have the pod's images, weighted by image size and
scaled by how many nodes have them (so a widely spread image doesn't attract every pod)."""

from __future__ import annotations

from typing import Any

from nodeagent.scheduler.framework import MAX_NODE_SCORE, CycleState, NodeInfo, PodInfo, Status, skip

NAME = "ImageLocality"
MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


class ImageLocality:
    name = NAME

    def __init__(self, handle: Any):
        self.handle = handle

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status | None:
        snap = self.handle.snapshot
        spread = {img: snap.image_nodes(img) for img in pod.images}
        if not any(spread.values()):
            return skip(NAME)  # no node has any of the images: every node would score 0
        state[NAME] = (spread, max(1, snap.num_nodes))
        return None

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        spread, total = state[NAME]
        s = 0
        for img in pod.images:
            size = node.images.get(img)
            if size:
                s += int(size * spread[img] / total)
        max_threshold = MAX_CONTAINER_THRESHOLD * max(1, len(pod.images))
        s = min(max(s, MIN_THRESHOLD), max_threshold)
        return MAX_NODE_SCORE * (s - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)

    def score_many(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[int]:
        return [self.score(state, pod, n) if n.images else 0 for n in nodes]


def new(args: None, handle: Any) -> ImageLocality:
    return ImageLocality(handle)

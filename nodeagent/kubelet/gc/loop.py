"""The kubelet's garbage-collection loops (kubelet.go StartGarbageCollection): dead containers every
`container_period` (kubelet: 1 minute), images every `image_period` (kubelet: 5 minutes); both first run at
start. An image pass that falls short twice in a row records ImageGCFailed on the Node, as kubelet does;
FreeDiskSpaceFailed is recorded for every shortfall."""

from __future__ import annotations

import logging
from typing import Any

from nodeagent.clock import Clock
from nodeagent.kubelet.gc.containers import ContainerGC
from nodeagent.kubelet.gc.images import ImageGC, ImageGCError

log = logging.getLogger("nodeagent.kubelet.gc")

FREE_DISK_SPACE_FAILED = "FreeDiskSpaceFailed"
IMAGE_GC_FAILED = "ImageGCFailed"


def node_ref(node_name: str) -> dict[str, Any]:
    """The object kubelet's node events are about (its nodeRef: the node's name as its uid)."""
    return {"kind": "Node", "apiVersion": "v1", "metadata": {"name": node_name, "uid": node_name}}


class GarbageCollector:
    def __init__(self, containers: ContainerGC, images: ImageGC, recorder: Any, node_name: str, clock: Clock,
                 container_period: float = 60.0, image_period: float = 300.0) -> None:
        self.containers = containers
        self.images = images
        self.recorder = recorder
        self.node = node_ref(node_name)
        self.clock = clock
        self.container_period = container_period
        self.image_period = image_period
        self._image_failed_before = False

    async def image_pass(self) -> int:
        """One image GC pass with kubelet's events; returns the bytes freed."""
        try:
            freed, _ = await self.images.garbage_collect()
        except ImageGCError as e:
            if str(e).startswith("Failed to garbage collect required amount"):
                self.recorder.record(self.node, "Warning", FREE_DISK_SPACE_FAILED, str(e))
            if self._image_failed_before:
                log.error("image garbage collection failed multiple times in a row: %s", e)
                self.recorder.record(self.node, "Warning", IMAGE_GC_FAILED, str(e))
            else:
                log.warning("image garbage collection failed once (it is retried in %gs): %s",
                            self.image_period, e)
            self._image_failed_before = True
            return 0
        self._image_failed_before = False
        if freed:
            log.info("image garbage collection freed %d bytes", freed)
        return freed

    async def run_containers(self) -> None:
        while True:
            try:
                await self.containers.collect()
            except Exception as e:
                log.warning("container garbage collection failed: %s", e)
            await self.clock.sleep(self.container_period)

    async def run_images(self) -> None:
        while True:
            try:
                await self.image_pass()
            except Exception as e:
                log.warning("image garbage collection failed: %s", e)
            await self.clock.sleep(self.image_period)

    async def reclaim_disk(self) -> None:
        """The eviction manager's node-level reclaim for disk signals: every dead container of pods that are
        gone or finished, then every unused image (DeleteAllUnusedContainers, DeleteUnusedImages)."""
        try:
            await self.containers.collect(evict_terminal=True)
        except Exception as e:
            log.info("eviction manager: unexpected error when attempting to reduce disk pressure: %s", e)
        try:
            freed = await self.images.delete_unused()
            if freed:
                log.info("eviction manager: unused images removed, %d bytes freed", freed)
        except Exception as e:
            log.info("eviction manager: unexpected error when attempting to reduce disk pressure: %s", e)

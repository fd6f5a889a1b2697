"""Image garbage collection (kubelet images/image_gc_manager.go).

Each pass notes when every image was first seen and last used by a container (any container the runtime
still has, exited ones included). Images unused for `imageMaximumGCAge` go first; then, when the image
filesystem's usage reaches `--image-gc-high-threshold` percent, unused images older than
`--image-minimum-gc-age` are removed least recently used first until usage is back at
`--image-gc-low-threshold`. Pinned images and images a container uses are never removed. Falling short
records kubelet's FreeDiskSpaceFailed event (and ImageGCFailed from the GC loop) on the Node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from cri.client import RuntimeClient
from nodeagent.clock import Clock
from nodeagent.kubelet.eviction.signals import observe_fs

log = logging.getLogger("nodeagent.kubelet.gc")


class ImageGCError(Exception):
    """A pass that could not free what the thresholds ask (kubelet's message)."""


@dataclasses.dataclass(frozen=True)
class ImageGCPolicy:
    high_threshold: int = 85  # --image-gc-high-threshold, percent of the image filesystem
    low_threshold: int = 80  # --image-gc-low-threshold
    min_age: float = 120.0  # --image-minimum-gc-age, seconds
    max_age: float = 0.0  # imageMaximumGCAge (config file), seconds; 0: off

    def __post_init__(self) -> None:
        if not 0 <= self.high_threshold <= 100:
            raise ValueError(f"invalid HighThresholdPercent {self.high_threshold}, must be in range [0-100]")
        if not 0 <= self.low_threshold <= 100:
            raise ValueError(f"invalid LowThresholdPercent {self.low_threshold}, must be in range [0-100]")
        if self.low_threshold > self.high_threshold:
            raise ValueError(f"LowThresholdPercent {self.low_threshold} can not be higher than "
                             f"HighThresholdPercent {self.high_threshold}")
        if self.min_age < 0 or self.max_age < 0:
            raise ValueError("image GC ages must not be negative")
        if self.max_age and self.max_age < self.min_age:
            raise ValueError(f"imageMaximumGCAge {self.max_age:g}s must be greater than imageMinimumGCAge "
                             f"{self.min_age:g}s")


@dataclasses.dataclass
class ImageRecord:
    first_detected: float
    last_used: float
    size: int
    pinned: bool
    name: str  # a tag, for the log


@dataclasses.dataclass(frozen=True)
class Candidate:
    id: str
    first_detected: float
    last_used: float
    size: int


def eviction_order(records: dict[str, ImageRecord], in_use: set[str], now: float,
                   min_age: float) -> list[Candidate]:
    """The images freeSpace may remove, least recently used first (ties: first detected first)."""
    out = [Candidate(i, r.first_detected, r.last_used, r.size) for i, r in records.items()
           if i not in in_use and not r.pinned and now - r.first_detected >= min_age]
    return sorted(out, key=lambda c: (c.last_used, c.first_detected))


def amount_to_free(policy: ImageGCPolicy, capacity: int, available: int) -> int:
    """Bytes to free when usage reached the high threshold (0 otherwise), down to the low threshold."""
    if capacity <= 0:
        return 0
    usage = 100 - available * 100 // capacity
    if usage < policy.high_threshold:
        return 0
    return capacity * (100 - policy.low_threshold) // 100 - available


class ImageGC:
    def __init__(self, cri: RuntimeClient, policy: ImageGCPolicy, clock: Clock,
                 fs_path: Callable[[], str] | None = None) -> None:
        self.cri = cri
        self.policy = policy
        self.clock = clock
        self.fs_path = fs_path  # the image filesystem's path; None: the runtime's ImageFsInfo mountpoint
        self.records: dict[str, ImageRecord] = {}
        self.began = clock.now()

    async def detect(self) -> set[str]:
        """detectImages: refresh the records; returns the ids of images a container uses."""
        now = self.clock.now()
        images = await self.cri.list_images()
        by_ref: dict[str, str] = {}
        for img in images:
            for ref in (img.id, *img.repo_tags, *img.repo_digests):
                by_ref[ref] = img.id
        in_use = set()
        for c in await self.cri.list_containers():
            for ref in (c.image_ref, c.image_id, c.image.image):
                if ref and ref in by_ref:
                    in_use.add(by_ref[ref])
        seen = set()
        for img in images:
            seen.add(img.id)
            r = self.records.get(img.id)
            if r is None:
                r = self.records[img.id] = ImageRecord(now, 0.0, 0, False, "")
            r.size, r.pinned = int(img.size), bool(img.pinned)
            r.name = img.repo_tags[0] if img.repo_tags else img.id
            if img.id in in_use:
                r.last_used = now
        for gone in set(self.records) - seen:
            del self.records[gone]
        return in_use

    async def _image_fs(self) -> tuple[int, int]:
        """(capacity, available) bytes of the image filesystem."""
        path = self.fs_path() if self.fs_path is not None else ""
        if not path:
            info = await self.cri.image_fs_info()
            fs = next(iter(info.image_filesystems), None)
            path = fs.fs_id.mountpoint if fs is not None else ""
        if not path or not await asyncio.to_thread(Path(path).exists):
            raise ImageGCError("invalid capacity 0 on image filesystem")
        obs, _ = await asyncio.to_thread(observe_fs, path)
        return int(obs.capacity), int(obs.available)

    async def free_space(self, want: int, in_use: set[str]) -> int:
        """freeSpace: remove unused images, least recently used first, until `want` bytes are freed."""
        now = self.clock.now()
        freed = 0
        errors = []
        for c in eviction_order(self.records, in_use, now, self.policy.min_age):
            if freed >= want:
                break
            name = self.records[c.id].name
            try:
                await self.cri.remove_image(c.id)
            except Exception as e:
                errors.append(f"{name}: {e}")
                continue
            log.info("image GC removed %s (%d bytes, last used %s)", name, c.size,
                     f"{now - c.last_used:.0f}s ago" if c.last_used else "never")
            self.records.pop(c.id, None)
            freed += c.size
        if errors:
            raise ImageGCError(f"wanted to free {want} bytes, but freed {freed} bytes space with errors in "
                               f"image deletion: {'; '.join(errors)}")
        return freed

    async def free_old_images(self, in_use: set[str]) -> int:
        """freeOldImages: images unused for longer than imageMaximumGCAge (once that long has passed since
        the kubelet started)."""
        now = self.clock.now()
        if not self.policy.max_age or now - self.began <= self.policy.max_age:
            return 0
        old = {i: r for i, r in self.records.items() if now - max(r.last_used, r.first_detected)
               > self.policy.max_age}
        freed = 0
        for c in eviction_order(old, in_use, now, self.policy.min_age):
            try:
                await self.cri.remove_image(c.id)
            except Exception as e:
                log.warning("image GC: removing %s past imageMaximumGCAge failed: %s", c.id, e)
                continue
            log.info("image GC removed %s: unused for more than imageMaximumGCAge", self.records[c.id].name)
            self.records.pop(c.id, None)
            freed += c.size
        return freed

    async def garbage_collect(self) -> tuple[int, int]:
        """One GarbageCollect pass; returns (bytes freed, bytes asked for). ImageGCError when it falls
        short."""
        in_use = await self.detect()
        freed = await self.free_old_images(in_use)
        capacity, available = await self._image_fs()
        if available > capacity:
            available = capacity
        want = amount_to_free(self.policy, capacity, available)
        if want <= 0:
            return freed, 0
        log.info("disk usage on image filesystem is over the high threshold (%d%%), trying to free %d "
                 "bytes down to the low threshold (%d%%)", self.policy.high_threshold, want,
                 self.policy.low_threshold)
        got = await self.free_space(want, in_use)
        if got < want:
            raise ImageGCError("Failed to garbage collect required amount of images. Attempted to free "
                               f"{want} bytes, but only found {got} bytes eligible to free.")
        return freed + got, want

    async def delete_unused(self) -> int:
        """DeleteUnusedImages (disk-pressure reclaim): every unused image past the minimum age."""
        in_use = await self.detect()
        return await self.free_space(1 << 62, in_use)

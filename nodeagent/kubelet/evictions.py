"""The eviction loop (kubelet eviction_manager.go's synchronize, every housekeeping interval).

Each pass: pods over their own ephemeral-storage limits or emptyDir sizeLimits are evicted first
(localStorageEviction); then the node's signals are observed and `eviction.EvictionManager` decides. A disk
signal first reclaims node-level resources (dead containers, then unused images: `reclaim_disk`) and evicts
only when a threshold is still met after it. At most one pod goes per pass: it gets an Evicted event and
its status Failed/Evicted (kept by the pod worker, which then stops its containers), as the kubelet reports.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from cri.client import RuntimeClient
from nodeagent.clock import Clock
from nodeagent.kubelet.eviction import Eviction, EvictionManager, PodUsage, evicted_status, observe
from nodeagent.kubelet.eviction.manager import thresholds_met
from nodeagent.kubelet.eviction.signals import memory_root
from nodeagent.kubelet.eviction.usage import UsagePaths, has_local_limits, usages
from nodeagent.kubelet.labels import CONTAINER_NAME_LABEL, POD_UID_LABEL

log = logging.getLogger("nodeagent.kubelet.eviction")

DISK_RESOURCES = ("ephemeral-storage", "inodes")
POD_CLEANUP_TIMEOUT = 30.0  # kubelet's podCleanupTimeout
POD_CLEANUP_POLL = 1.0  # kubelet's podCleanupPollFreq


class EvictionLoop:
    def __init__(self, manager: EvictionManager, clock: Clock, nodefs: str,
                 active_pods: Callable[[], list[dict]], cgroup_of: Callable[[Mapping[str, Any]], str],
                 evict: Callable[[dict, dict[str, Any]], Any], recorder: Any, period: float = 10.0,
                 reclaim_disk: Callable[[], Awaitable[None]] | None = None, cri: RuntimeClient | None = None,
                 log_dir_of: Callable[[Mapping[str, Any]], Path] | None = None,
                 volumes_dir_of: Callable[[Mapping[str, Any]], Path] | None = None,
                 cleaned: Callable[[Mapping[str, Any]], bool] | None = None,
                 cleanup_timeout: float = POD_CLEANUP_TIMEOUT) -> None:
        self.manager = manager
        self.clock = clock
        self.nodefs = nodefs
        self.active_pods = active_pods
        self.evict = evict
        self.recorder = recorder
        self.period = period
        self.reclaim_disk = reclaim_disk
        self.cri = cri  # for the containers' writable layers; None: memory only
        self.cleaned = cleaned  # whether an evicted pod's containers and volumes are gone (blocking check)
        self.cleanup_timeout = cleanup_timeout
        self.paths = UsagePaths(memory_root(), cgroup_of,
                                log_dir_of or (lambda p: Path("/nonexistent")),
                                volumes_dir_of or (lambda p: Path("/nonexistent")))

    async def _usage(self, pods: list[dict], disk: bool,
                     which: Callable[[Mapping[str, Any]], bool] = lambda p: True) -> dict[str, PodUsage]:
        rootfs: dict[tuple[str, str], tuple[int, int]] | None = None
        if disk and self.cri is not None:
            rootfs = {}
            for s in await self.cri.list_container_stats():
                labels = s.attributes.labels
                key = (labels.get(POD_UID_LABEL, ""), labels.get(CONTAINER_NAME_LABEL, ""))
                if s.HasField("writable_layer"):
                    rootfs[key] = (s.writable_layer.used_bytes.value, s.writable_layer.inodes_used.value)
        return await asyncio.to_thread(usages, pods, self.paths, rootfs, which)

    async def _carry_out(self, victim: Eviction) -> None:
        pod = dict(victim.pod)
        log.warning("evicting pod %s/%s: %s", pod["metadata"].get("namespace"), pod["metadata"]["name"],
                    victim.message)
        self.recorder.record(pod, "Warning", "Evicted", victim.message)
        status = evicted_status(pod, victim.message, self.clock.now())
        res = self.evict(pod, status)
        if asyncio.iscoroutine(res):
            await res
        await self._wait_cleanup(pod)

    async def _wait_cleanup(self, pod: Mapping[str, Any]) -> None:
        """waitForPodsCleanup: the next pass measures the node only once the victim's resources are freed
        (else a second pod goes for what the first one still holds), up to the cleanup timeout."""
        if self.cleaned is None:
            return
        end = self.clock.monotonic() + self.cleanup_timeout
        while not await asyncio.to_thread(self.cleaned, pod):
            if self.clock.monotonic() >= end:
                log.warning("eviction manager: timed out waiting for pod %s/%s to be cleaned up",
                            pod["metadata"].get("namespace"), pod["metadata"]["name"])
                return
            await self.clock.sleep(POD_CLEANUP_POLL)
    async def pass_once(self) -> None:
        pods = self.active_pods()
        if self.cri is not None and any(has_local_limits(p) for p in pods):
            local = await self._usage(pods, True, has_local_limits)
            evictions = self.manager.local_storage_evictions(
                pods, lambda p: local.get((p.get("metadata") or {}).get("uid", "")))
            for ev in evictions:
                await self._carry_out(ev)
            if evictions:
                return
        obs = await asyncio.to_thread(observe, self.nodefs)
        met = self.manager.evaluate(obs)
        if not met:
            return
        target = self.manager.target(met)
        disk = target.resource in DISK_RESOURCES
        if disk and self.reclaim_disk is not None:
            await self.reclaim_disk()
            obs = await asyncio.to_thread(observe, self.nodefs)
            if not thresholds_met(self.manager.thresholds, obs):
                log.info("eviction manager: able to reduce %s pressure without evicting pods",
                         target.resource)
                return
        stats = await self._usage(pods, disk)
        victim = self.manager.choose(met, obs, pods,
                                     lambda p: stats.get((p.get("metadata") or {}).get("uid", "")))
        if victim is not None:
            await self._carry_out(victim)

    async def run(self) -> None:
        while True:
            try:
                await self.pass_once()
            except Exception as e:
                log.warning("eviction pass failed: %s", e)
            await self.clock.sleep(self.period)

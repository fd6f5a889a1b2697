"""The eviction loop (kubelet eviction_manager.go's synchronize, every housekeeping interval).

Observes the node's signals, lets `eviction.EvictionManager` decide, and carries out at most one eviction
per pass: the victim gets an Evicted event, its status Failed/Evicted (kept by the pod worker, which then
stops its containers), exactly as the kubelet reports it. Pod memory comes from the pod's cgroup.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nodeagent.clock import Clock
from nodeagent.kubelet.eviction import EvictionManager, PodUsage, evicted_status, observe
from nodeagent.kubelet.eviction.signals import cgroup_working_set, memory_root

log = logging.getLogger("nodeagent.kubelet.eviction")


class EvictionLoop:
    def __init__(self, manager: EvictionManager, clock: Clock, nodefs: str,
                 active_pods: Callable[[], list[dict]], cgroup_of: Callable[[Mapping[str, Any]], str],
                 evict: Callable[[dict, dict[str, Any]], Any], recorder: Any, period: float = 10.0) -> None:
        self.manager = manager
        self.clock = clock
        self.nodefs = nodefs
        self.active_pods = active_pods
        self.cgroup_of = cgroup_of
        self.evict = evict
        self.recorder = recorder
        self.period = period
        self._mem = memory_root()  # where the pods' memory cgroups are

    def _stats(self, pod: Mapping[str, Any]) -> PodUsage | None:
        if self._mem is None:
            return None
        d = Path(str(self._mem) + self.cgroup_of(pod))
        try:
            return PodUsage(memory=cgroup_working_set(d))
        except (OSError, ValueError):
            return None

    async def pass_once(self) -> None:
        obs = await asyncio.to_thread(observe, self.nodefs)
        pods = self.active_pods()
        victim = await asyncio.to_thread(self.manager.synchronize, obs, pods, self._stats)
        if victim is None:
            return
        pod = dict(victim.pod)
        log.warning("evicting pod %s/%s: %s", pod["metadata"].get("namespace"), pod["metadata"]["name"],
                    victim.message)
        self.recorder.record(pod, "Warning", "Evicted", victim.message)
        status = evicted_status(pod, victim.message, self.clock.now())
        res = self.evict(pod, status)
        if asyncio.iscoroutine(res):
            await res

    async def run(self) -> None:
        while True:
            try:
                await self.pass_once()
            except Exception as e:
                log.warning("eviction pass failed: %s", e)
            await self.clock.sleep(self.period)

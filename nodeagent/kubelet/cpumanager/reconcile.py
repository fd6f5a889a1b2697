"""The CPU manager's reconcile loop (cpu_manager.go reconcileState): every running container's cpuset is
made what the policy says — exclusive CPUs, or the default set as it shrinks and grows — through CRI
UpdateContainerResources; assignments of pods no longer active are dropped (removeStaleState)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cri.client import RuntimeClient
from cri.proto import api_pb2 as pb
from nodeagent.clock import Clock
from nodeagent.kubelet.cpumanager.manager import STATIC, CPUManager
from nodeagent.kubelet.labels import CONTAINER_NAME_LABEL, POD_UID_LABEL

log = logging.getLogger("nodeagent.kubelet.cpumanager")


class CPUReconciler:
    def __init__(self, manager: CPUManager, cri: RuntimeClient, clock: Clock,
                 active_pods: Callable[[], Sequence[Mapping[str, Any]]], period: float = 10.0) -> None:
        self.manager = manager
        self.cri = cri
        self.clock = clock
        self.active_pods = active_pods
        self.period = period
        self.applied: dict[str, str] = {}  # container id → the cpuset last written (lastUpdateState)
        self._wake = asyncio.Event()

    def poke(self) -> None:
        """An allocation or release changed the default set: reconcile now, not at the next period."""
        self._wake.set()

    async def reconcile(self) -> int:
        """One pass; returns how many containers were updated."""
        if self.manager.policy != STATIC:
            return 0
        pods = {(p.get("metadata") or {}).get("uid", ""): p for p in self.active_pods()}
        if await asyncio.to_thread(self.manager.remove_stale, pods):
            log.info("released the CPUs of pods no longer active")
        updated = 0
        running = await self.cri.list_containers(state=pb.CONTAINER_RUNNING)
        live = set()
        for c in running:
            pod = pods.get(c.labels.get(POD_UID_LABEL, ""))
            if pod is None:
                continue
            live.add(c.id)
            name = c.labels.get(CONTAINER_NAME_LABEL)
            spec = next((x for f in ("initContainers", "containers")
                         for x in (pod.get("spec") or {}).get(f) or [] if x.get("name") == name), None)
            if spec is None:
                continue
            want = self.manager.cpuset(pod, spec)
            if not want or self.applied.get(c.id) == want:
                continue
            try:
                await self.cri.update_container_resources(c.id, pb.LinuxContainerResources(cpuset_cpus=want))
            except Exception as e:  # the container may have exited since the list: next pass
                log.warning("cpuset %s for container %s (%s) not applied: %s", want, c.id[:12],
                            c.labels.get(CONTAINER_NAME_LABEL), e)
                continue
            self.applied[c.id] = want
            updated += 1
        self.applied = {k: v for k, v in self.applied.items() if k in live}
        return updated

    def created(self, container_id: str, cpuset: str) -> None:
        """A container was created with this cpuset (no update needed until the set changes)."""
        if cpuset:
            self.applied[container_id] = cpuset

    async def run(self) -> None:
        """Reconcile every period or when poked; the first pass waits a period, so the pod sources (static
        pods too) are loaded before assignments of pods not seen are dropped as stale."""
        while True:
            self._wake.clear()
            sleeper = asyncio.ensure_future(self.clock.sleep(self.period))
            waker = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait((sleeper, waker), return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                waker.cancel()
            try:
                await self.reconcile()
            except Exception as e:
                log.warning("CPU manager reconcile failed: %s", e)

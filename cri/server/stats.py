"""ContainerStats, ListContainerStats, PodSandboxStats, ListPodSandboxStats (from cgroups)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from cri.proto import api_pb2 as pb
from cri.server.boundary import rpc

if TYPE_CHECKING:
    from cri.runtime.service import Runtime


class StatsVerbs:
    runtime: Runtime

    @rpc
    async def ContainerStats(self, request, context):
        c = self.runtime.container(request.container_id)
        return pb.ContainerStatsResponse(stats=await asyncio.to_thread(self.runtime.container_stats, c))

    @rpc
    async def ListContainerStats(self, request, context):
        rt = self.runtime
        out = [await asyncio.to_thread(rt.container_stats, c) for c in rt.stats_containers(request.filter)]
        return pb.ListContainerStatsResponse(stats=out)

    @rpc
    async def PodSandboxStats(self, request, context):
        s = self.runtime.sandbox(request.pod_sandbox_id)
        return pb.PodSandboxStatsResponse(stats=await asyncio.to_thread(self.runtime.sandbox_stats, s))

    @rpc
    async def ListPodSandboxStats(self, request, context):
        rt = self.runtime
        out = [await asyncio.to_thread(rt.sandbox_stats, s) for s in rt.stats_sandboxes(request.filter)]
        return pb.ListPodSandboxStatsResponse(stats=out)

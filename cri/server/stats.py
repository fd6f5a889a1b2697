"""ContainerStats, ListContainerStats, PodSandboxStats, ListPodSandboxStats (from cgroups)."""

from __future__ import annotations

import asyncio

from cri.proto import api_pb2 as pb
from cri.server.boundary import rpc


class StatsVerbs:
    runtime: object

    @rpc
    async def ContainerStats(self, request, context):
        c = self.runtime.container(request.container_id)
        return pb.ContainerStatsResponse(stats=await asyncio.to_thread(self.runtime.container_stats, c))

    @rpc
    async def ListContainerStats(self, request, context):
        rt = self.runtime
        f = request.filter
        out = []
        for c in list(rt.containers.values()):
            if not c.state.has_stats():
                continue
            if f.id and not c.id.startswith(f.id):
                continue
            if f.pod_sandbox_id and not c.sandbox_id.startswith(f.pod_sandbox_id):
                continue
            if f.label_selector:
                labels = rt.container_config(c).labels
                if any(labels.get(k) != v for k, v in f.label_selector.items()):
                    continue
            out.append(await asyncio.to_thread(rt.container_stats, c))
        return pb.ListContainerStatsResponse(stats=out)

    @rpc
    async def PodSandboxStats(self, request, context):
        s = self.runtime.sandbox(request.pod_sandbox_id)
        return pb.PodSandboxStatsResponse(stats=await asyncio.to_thread(self.runtime.sandbox_stats, s))

    @rpc
    async def ListPodSandboxStats(self, request, context):
        rt = self.runtime
        f = request.filter
        out = []
        for s in list(rt.sandboxes.values()):
            if f.id and not s.id.startswith(f.id):
                continue
            if f.label_selector:
                labels = rt.sandbox_config(s).labels
                if any(labels.get(k) != v for k, v in f.label_selector.items()):
                    continue
            out.append(await asyncio.to_thread(rt.sandbox_stats, s))
        return pb.ListPodSandboxStatsResponse(stats=out)

"""RunPodSandbox, StopPodSandbox, RemovePodSandbox, PodSandboxStatus, ListPodSandbox."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from cri.proto import api_pb2 as pb
from cri.server.boundary import rpc

if TYPE_CHECKING:
    from cri.runtime.service import Runtime


class SandboxVerbs:
    runtime: Runtime

    @rpc
    async def RunPodSandbox(self, request, context):
        sid = await self.runtime.run_pod_sandbox(request.config, request.runtime_handler)
        return pb.RunPodSandboxResponse(pod_sandbox_id=sid)

    @rpc
    async def StopPodSandbox(self, request, context):
        await self.runtime.stop_pod_sandbox(request.pod_sandbox_id)
        return pb.StopPodSandboxResponse()

    @rpc
    async def RemovePodSandbox(self, request, context):
        await self.runtime.remove_pod_sandbox(request.pod_sandbox_id)
        return pb.RemovePodSandboxResponse()

    @rpc
    async def PodSandboxStatus(self, request, context):
        rt = self.runtime
        s = rt.sandbox(request.pod_sandbox_id)
        resp = pb.PodSandboxStatusResponse(status=rt.sandbox_status(s), timestamp=time.time_ns())
        if request.verbose:
            resp.info["info"] = json.dumps({"pid": s.pid, "cgroup": s.cgroup, "podCgroup": s.pod_cgroup,
                                            "netns": f"/proc/{s.pid}/ns/net", "hostname": s.hostname})
        return resp

    @rpc
    async def ListPodSandbox(self, request, context):
        rt = self.runtime
        f = request.filter if request.HasField("filter") else None
        items = []
        for s in rt.list_sandboxes(f):
            st = rt.sandbox_status(s)
            items.append(pb.PodSandbox(id=s.id, metadata=st.metadata, state=st.state, created_at=s.created_at,
                                       labels=st.labels, annotations=st.annotations,
                                       runtime_handler=s.runtime_handler))
        return pb.ListPodSandboxResponse(items=items)

"""CreateContainer, StartContainer, StopContainer, RemoveContainer, ListContainers, ContainerStatus,
UpdateContainerResources, ReopenContainerLog."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from cri.proto import api_pb2 as pb
from cri.server.boundary import rpc

if TYPE_CHECKING:
    from cri.runtime.service import Runtime


class ContainerVerbs:
    runtime: Runtime

    @rpc
    async def CreateContainer(self, request, context):
        sc = request.sandbox_config if request.HasField("sandbox_config") else None
        cid = await self.runtime.create_container(request.pod_sandbox_id, request.config, sc)
        return pb.CreateContainerResponse(container_id=cid)

    @rpc
    async def StartContainer(self, request, context):
        await self.runtime.start_container(request.container_id)
        return pb.StartContainerResponse()

    @rpc
    async def StopContainer(self, request, context):
        await self.runtime.stop_container(request.container_id, request.timeout)
        return pb.StopContainerResponse()

    @rpc
    async def RemoveContainer(self, request, context):
        await self.runtime.remove_container(request.container_id)
        return pb.RemoveContainerResponse()

    @rpc
    async def ListContainers(self, request, context):
        rt = self.runtime
        f = request.filter if request.HasField("filter") else None
        out = []
        for c in rt.list_containers(f):
            st = rt.container_status(c)
            out.append(pb.Container(id=c.id, pod_sandbox_id=c.sandbox_id, metadata=st.metadata,
                                    image=st.image, image_ref=st.image_ref, image_id=st.image_id,
                                    state=st.state,
                                    created_at=st.created_at, labels=st.labels, annotations=st.annotations))
        return pb.ListContainersResponse(containers=out)

    @rpc
    async def ContainerStatus(self, request, context):
        rt = self.runtime
        c = rt.container(request.container_id)
        resp = pb.ContainerStatusResponse(status=rt.container_status(c))
        if request.verbose:
            resp.info["info"] = json.dumps({"pid": c.pid, "shimPid": c.shim_pid, "sandboxID": c.sandbox_id,
                                            "cgroup": c.cgroup, "rootfs": c.rootfs, "argv": c.launch["argv"]})
        return resp

    @rpc
    async def UpdateContainerResources(self, request, context):
        await self.runtime.update_resources(request.container_id, request.linux)
        return pb.UpdateContainerResourcesResponse()

    @rpc
    async def ReopenContainerLog(self, request, context):
        await self.runtime.reopen_log(request.container_id)
        return pb.ReopenContainerLogResponse()

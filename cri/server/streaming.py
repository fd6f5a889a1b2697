"""ExecSync, and the streaming verbs (Exec, Attach, PortForward) this runtime does not serve yet."""

from __future__ import annotations

from cri.proto import api_pb2 as pb
from cri.runtime.errors import InvalidArgument, Unimplemented
from cri.server.boundary import rpc

STREAMING = ("streaming {verb} needs the SPDY/websocket streaming server, which this runtime does not "
             "implement yet; use ExecSync (crictl exec without -i/-t) instead")


class StreamingVerbs:
    runtime: object

    @rpc
    async def ExecSync(self, request, context):
        if request.timeout < 0:
            raise InvalidArgument("timeout: must not be negative")
        code, out, err = await self.runtime.exec_sync(request.container_id, list(request.cmd), request.timeout)
        return pb.ExecSyncResponse(stdout=out, stderr=err, exit_code=code)

    @rpc
    async def Exec(self, request, context):
        self.runtime.container(request.container_id)
        raise Unimplemented(STREAMING.format(verb="Exec"))

    @rpc
    async def Attach(self, request, context):
        self.runtime.container(request.container_id)
        raise Unimplemented(STREAMING.format(verb="Attach"))

    @rpc
    async def PortForward(self, request, context):
        self.runtime.sandbox(request.pod_sandbox_id)
        raise Unimplemented(STREAMING.format(verb="PortForward"))

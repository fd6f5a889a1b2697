"""ExecSync, and the streaming verbs Exec, Attach, PortForward (one-time URLs on the stream server)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cri.proto import api_pb2 as pb
from cri.runtime.errors import FailedPrecondition, InvalidArgument, Unimplemented
from cri.server.boundary import rpc

if TYPE_CHECKING:
    from cri.runtime.service import Runtime
    from cri.server.stream_server import StreamServer


class StreamingVerbs:
    runtime: Runtime
    streams: StreamServer | None

    def _need_streams(self) -> StreamServer:
        if self.streams is None:
            raise Unimplemented("the streaming server is not running in this daemon")
        return self.streams

    @rpc
    async def ExecSync(self, request, context):
        if request.timeout < 0:
            raise InvalidArgument("timeout: must not be negative")
        code, out, err = await self.runtime.exec_sync(request.container_id, list(request.cmd),
                                                      request.timeout)
        return pb.ExecSyncResponse(stdout=out, stderr=err, exit_code=code)

    @rpc
    async def Exec(self, request, context):
        c = self.runtime.container(request.container_id)
        if not request.cmd:
            raise InvalidArgument("cmd is required")
        if not (request.stdin or request.stdout or request.stderr):
            raise InvalidArgument("one of stdin, stdout and stderr must be set")
        if request.tty and request.stderr:
            raise InvalidArgument("stderr must be false when tty is set (the terminal merges the streams)")
        if not c.state.can_exec():
            raise FailedPrecondition(f"container {c.id} is not running")
        url = self._need_streams().register("exec", {
            "container_id": c.id, "cmd": list(request.cmd), "tty": request.tty, "stdin": request.stdin,
            "stdout": request.stdout, "stderr": request.stderr})
        return pb.ExecResponse(url=url)

    @rpc
    async def Attach(self, request, context):
        c = self.runtime.container(request.container_id)
        if not (request.stdin or request.stdout or request.stderr):
            raise InvalidArgument("one of stdin, stdout and stderr must be set")
        if request.tty and request.stderr:
            raise InvalidArgument("stderr must be false when tty is set (the terminal merges the streams)")
        if not c.state.can_attach():
            raise FailedPrecondition(f"container {c.id} is not running")
        cfg = self.runtime.container_config(c)
        # Input to a container made without stdin is dropped, output still streams (containerd's way).
        url = self._need_streams().register("attach", {
            "container_id": c.id, "stdin": request.stdin, "stdout": request.stdout, "stderr": request.stderr,
            "tty": request.tty, "container_stdin": cfg.stdin, "container_tty": cfg.tty,
            "stdin_once": cfg.stdin_once})
        return pb.AttachResponse(url=url)

    @rpc
    async def PortForward(self, request, context):
        s = self.runtime.sandbox(request.pod_sandbox_id)
        if not s.state.can_port_forward():
            raise FailedPrecondition(f"sandbox {s.id} is not ready")
        for p in request.port:
            if not 0 < p < 65536:
                raise InvalidArgument(f"port: {p} is not a valid port")
        url = self._need_streams().register("portforward", {"sandbox_id": s.id, "ports": list(request.port)})
        return pb.PortForwardResponse(url=url)

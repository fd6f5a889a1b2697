"""An in-memory CRI runtime: the server side of runtime.v1 for unit tests of pod syncs.

`FakeRuntime` implements the RuntimeService and ImageService verbs the kubelet uses (the rest answer
UNIMPLEMENTED, as the generated servicer does); `serve()` puts it on a unix socket in a temporary
directory and hands out the real client (`cri.client.RuntimeClient`) connected to it, so the test
exercises the very requests the kubelet sends. Sandboxes and containers are plain pb messages;
`exit(cid, code)` makes a running container exit, and `calls` records the mutating verbs in order,
so tests assert what a sync asked the runtime to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import grpc

from cri.client import RuntimeClient
from cri.proto import api_pb2 as pb
from cri.proto import api_pb2_grpc


@contextlib.asynccontextmanager
async def serve(runtime: api_pb2_grpc.RuntimeServiceServicer,
                images: api_pb2_grpc.ImageServiceServicer | None = None) -> AsyncIterator[RuntimeClient]:
    """Serve `runtime` (and `images`, by default `runtime` when it serves images too) on a private unix
    socket; yield a client connected to it; stop both afterwards."""
    if images is None and isinstance(runtime, api_pb2_grpc.ImageServiceServicer):
        images = runtime
    d = Path(tempfile.mkdtemp(prefix="fake-cri-"))  # short: a socket path has 108 bytes at most
    server = grpc.aio.server()
    api_pb2_grpc.add_RuntimeServiceServicer_to_server(runtime, server)
    if images is not None:
        api_pb2_grpc.add_ImageServiceServicer_to_server(images, server)
    server.add_insecure_port(f"unix://{d}/cri.sock")
    await server.start()
    client = RuntimeClient(str(d / "cri.sock"))
    try:
        yield client
    finally:
        await client.close()
        await server.stop(None)
        shutil.rmtree(d, ignore_errors=True)


def _selected(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


class FakeRuntime(api_pb2_grpc.RuntimeServiceServicer, api_pb2_grpc.ImageServiceServicer):
    def __init__(self, images: tuple[str, ...] = (), clock: Any = None) -> None:
        self.clock = clock  # timestamps follow the test's clock (a FakeClock), else the wall clock
        self.sandboxes: dict[str, pb.PodSandbox] = {}
        self.sandbox_configs: dict[str, pb.PodSandboxConfig] = {}
        self.containers: dict[str, pb.ContainerStatus] = {}
        self.container_sandbox: dict[str, str] = {}
        self.images = set(images)
        self.calls: list[tuple[str, Any]] = []
        self.fail_start: set[str] = set()  # container names whose start fails
        self.exec_results: dict[tuple[str, ...], int] = {}  # command → exit code (default 0)
        self.unpullable: set[str] = set()
        self.pull_gates: dict[str, asyncio.Event] = {}  # image → its pull waits until the event is set
        self.private: dict[str, tuple[str, str]] = {}  # image → the (username, password) its registry wants
        self.pull_auths: list[tuple[str, str, str]] = []  # (image, username, password) of each PullImage
        self.image_users: dict[str, str] = {}  # image → its config's User ("1000", "nobody"); none by default
        self.last_config: pb.ContainerConfig | None = None
        self.network_ready = True  # what Status says of the pod network
        self._ids = itertools.count(1)
        self._ip = itertools.count(2)

    def _now(self) -> int:
        return int(self.clock.now() * 1e9) if self.clock is not None else time.time_ns()

    # -- what tests do to it --------------------------------------------------------------------------
    def exit(self, cid: str, code: int) -> None:
        st = self.containers[cid]
        st.state = pb.CONTAINER_EXITED
        st.exit_code = code
        st.finished_at = self._now()
        st.reason = "Completed" if code == 0 else "Error"

    def running(self, name: str) -> list[str]:
        return [c for c, st in self.containers.items()
                if st.metadata.name == name and st.state == pb.CONTAINER_RUNNING]

    @staticmethod
    async def _need(table: Mapping[str, Any], key: str, context: grpc.aio.ServicerContext) -> Any:
        if key not in table:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"{key} not found")
        return table[key]

    # -- the runtime ----------------------------------------------------------------------------------
    async def Status(self, request, context):
        """Ready, with its pod network unless a test took it away (`network_ready`)."""
        resp = pb.StatusResponse()
        resp.status.conditions.add(type="RuntimeReady", status=True)
        if self.network_ready:
            resp.status.conditions.add(type="NetworkReady", status=True)
        else:
            resp.status.conditions.add(type="NetworkReady", status=False, reason="NetworkPluginNotReady",
                                       message="Network plugin returns error: cni plugin not initialized")
        return resp

    # -- sandboxes ------------------------------------------------------------------------------------
    async def ListPodSandbox(self, request, context):
        f = request.filter
        items = [s for s in self.sandboxes.values()
                 if (not f.id or s.id == f.id) and _selected(s.labels, f.label_selector)]
        return pb.ListPodSandboxResponse(items=items)

    async def PodSandboxStatus(self, request, context):
        s = await self._need(self.sandboxes, request.pod_sandbox_id, context)
        st = pb.PodSandboxStatus(id=s.id, state=s.state, metadata=s.metadata, labels=s.labels)
        st.network.ip = s.annotations.get("ip", "")
        return pb.PodSandboxStatusResponse(status=st)

    async def RunPodSandbox(self, request, context):
        config = request.config
        sid = f"sb{next(self._ids)}"
        self.calls.append(("RunPodSandbox", config.metadata.name))
        s = pb.PodSandbox(id=sid, metadata=config.metadata, state=pb.SANDBOX_READY, created_at=self._now(),
                          labels=config.labels)
        s.annotations["ip"] = f"10.0.0.{next(self._ip)}"
        self.sandboxes[sid] = s
        self.sandbox_configs[sid] = config
        return pb.RunPodSandboxResponse(pod_sandbox_id=sid)

    async def StopPodSandbox(self, request, context):
        sid = request.pod_sandbox_id
        s = await self._need(self.sandboxes, sid, context)
        self.calls.append(("StopPodSandbox", sid))
        for cid, owner in self.container_sandbox.items():
            if owner == sid and self.containers[cid].state == pb.CONTAINER_RUNNING:
                self.exit(cid, 137)
        s.state = pb.SANDBOX_NOTREADY
        return pb.StopPodSandboxResponse()

    async def RemovePodSandbox(self, request, context):
        sid = request.pod_sandbox_id
        await self._need(self.sandboxes, sid, context)
        self.calls.append(("RemovePodSandbox", sid))
        del self.sandboxes[sid]
        for cid in [c for c, owner in self.container_sandbox.items() if owner == sid]:
            del self.containers[cid]
            del self.container_sandbox[cid]
        return pb.RemovePodSandboxResponse()

    # -- containers -----------------------------------------------------------------------------------
    async def ListContainers(self, request, context):
        f = request.filter
        out = []
        for st in self.containers.values():
            if f.HasField("state") and st.state != f.state.state:
                continue
            if _selected(st.labels, f.label_selector):
                out.append(pb.Container(id=st.id, pod_sandbox_id=self.container_sandbox[st.id],
                                        metadata=st.metadata, state=st.state, labels=st.labels,
                                        annotations=st.annotations))
        return pb.ListContainersResponse(containers=out)

    async def ContainerStatus(self, request, context):
        st = await self._need(self.containers, request.container_id, context)
        return pb.ContainerStatusResponse(status=st)

    async def CreateContainer(self, request, context):
        config = request.config
        cid = f"c{next(self._ids)}"
        self.calls.append(("CreateContainer", config.metadata.name))
        self.containers[cid] = pb.ContainerStatus(
            id=cid, metadata=config.metadata, state=pb.CONTAINER_CREATED, created_at=self._now(),
            image=config.image, labels=config.labels, annotations=config.annotations, mounts=config.mounts)
        self.container_sandbox[cid] = request.pod_sandbox_id
        self.last_config = config
        return pb.CreateContainerResponse(container_id=cid)

    async def StartContainer(self, request, context):
        st = await self._need(self.containers, request.container_id, context)
        self.calls.append(("StartContainer", st.metadata.name))
        if st.metadata.name in self.fail_start:
            await context.abort(grpc.StatusCode.UNKNOWN, "container process did not start")
        st.state = pb.CONTAINER_RUNNING
        st.started_at = self._now()
        return pb.StartContainerResponse()

    async def StopContainer(self, request, context):
        cid = request.container_id
        st = await self._need(self.containers, cid, context)
        self.calls.append(("StopContainer", (st.metadata.name, request.timeout)))
        if st.state == pb.CONTAINER_RUNNING:
            self.exit(cid, 143)
        return pb.StopContainerResponse()

    async def RemoveContainer(self, request, context):
        cid = request.container_id
        st = await self._need(self.containers, cid, context)
        self.calls.append(("RemoveContainer", st.metadata.name))
        del self.containers[cid]
        del self.container_sandbox[cid]
        return pb.RemoveContainerResponse()

    async def UpdateContainerResources(self, request, context):
        st = await self._need(self.containers, request.container_id, context)
        self.calls.append(("UpdateContainerResources", (st.metadata.name, request.linux.cpuset_cpus)))
        return pb.UpdateContainerResourcesResponse()

    async def ListContainerStats(self, request, context):
        """Running containers with fixed usage (a writable layer of 4 KiB, 1 ms of CPU, 1 MiB of memory)."""
        out = []
        ts = self._now()
        for st in self.containers.values():
            if st.state != pb.CONTAINER_RUNNING:
                continue
            cs = pb.ContainerStats()
            cs.attributes.id = st.id
            cs.attributes.metadata.CopyFrom(st.metadata)
            cs.attributes.labels.update(st.labels)
            cs.cpu.timestamp, cs.cpu.usage_core_nano_seconds.value = ts, 1_000_000
            cs.memory.timestamp, cs.memory.working_set_bytes.value = ts, 1 << 20
            cs.writable_layer.timestamp, cs.writable_layer.used_bytes.value = ts, 4096
            cs.writable_layer.inodes_used.value = 1
            out.append(cs)
        return pb.ListContainerStatsResponse(stats=out)

    async def ExecSync(self, request, context):
        st = await self._need(self.containers, request.container_id, context)
        self.calls.append(("ExecSync", (st.metadata.name, tuple(request.cmd))))
        code = self.exec_results.get(tuple(request.cmd), 0)
        return pb.ExecSyncResponse(exit_code=code, stdout=b"", stderr=b"failed" if code else b"")

    # -- images ---------------------------------------------------------------------------------------
    async def ImageStatus(self, request, context):
        image = request.image.image
        if image not in self.images:
            return pb.ImageStatusResponse()
        img = pb.Image(id=f"sha256:{image}", size=1)
        user = self.image_users.get(image, "").split(":")[0]
        if user.isdigit():
            img.uid.value = int(user)
        elif user:
            img.username = user
        return pb.ImageStatusResponse(image=img)

    async def ListImages(self, request, context):
        return pb.ListImagesResponse(images=[pb.Image(id=f"sha256:{i}", repo_tags=[i], size=1)
                                             for i in sorted(self.images)])

    async def RemoveImage(self, request, context):
        image = request.image.image.removeprefix("sha256:")
        self.calls.append(("RemoveImage", image))
        self.images.discard(image)
        return pb.RemoveImageResponse()

    async def ImageFsInfo(self, request, context):
        """The image filesystem is the temporary directory's (a real statvfs for image GC)."""
        fs = pb.FilesystemUsage(timestamp=self._now())
        fs.fs_id.mountpoint = tempfile.gettempdir()
        return pb.ImageFsInfoResponse(image_filesystems=[fs])

    async def PullImage(self, request, context):
        image = request.image.image
        self.calls.append(("PullImage", image))
        self.pull_auths.append((image, request.auth.username, request.auth.password))
        if image in self.pull_gates:
            await self.pull_gates[image].wait()
        if image in self.unpullable:
            await context.abort(grpc.StatusCode.UNKNOWN, f"failed to resolve reference {image!r}: not found")
        want = self.private.get(image)
        if want is not None and want != (request.auth.username, request.auth.password):
            await context.abort(grpc.StatusCode.UNKNOWN, f"pulling {image}: 401 Unauthorized")
        self.images.add(image)
        return pb.PullImageResponse(image_ref=f"sha256:{image}")

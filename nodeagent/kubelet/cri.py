"""The kubelet's async CRI client (grpc.aio): the one place the node agent talks runtime.v1.

It speaks plain runtime.v1, so it works against our runtime and containerd alike.
"""

from __future__ import annotations

import grpc

from cri.client import CHANNEL_OPTIONS, endpoint_target
from cri.proto import api_pb2 as pb
from cri.proto import api_pb2_grpc

POD_UID_LABEL = "io.kubernetes.pod.uid"
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"
HASH_ANNOTATION = "io.kubernetes.container.hash"


class RuntimeClient:
    """Runtime and image service stubs over one channel, with the calls the pod workers make."""

    def __init__(self, endpoint: str, timeout: float = 120.0) -> None:
        self.channel = grpc.aio.insecure_channel(endpoint_target(endpoint), options=CHANNEL_OPTIONS)
        self.rt = api_pb2_grpc.RuntimeServiceStub(self.channel)
        self.img = api_pb2_grpc.ImageServiceStub(self.channel)
        self.timeout = timeout

    async def close(self) -> None:
        await self.channel.close()

    async def version(self) -> pb.VersionResponse:
        return await self.rt.Version(pb.VersionRequest(version="v1"), timeout=5)

    async def status(self) -> pb.StatusResponse:
        return await self.rt.Status(pb.StatusRequest(), timeout=5)

    async def update_runtime_config(self, pod_cidr: str) -> None:
        """Tell the runtime the node's podCIDR (the kubelet's updatePodCIDR)."""
        req = pb.UpdateRuntimeConfigRequest()
        req.runtime_config.network_config.pod_cidr = pod_cidr
        await self.rt.UpdateRuntimeConfig(req, timeout=5)

    async def list_sandboxes(self, pod_uid: str | None = None) -> list[pb.PodSandbox]:
        f = pb.PodSandboxFilter()
        if pod_uid:
            f.label_selector[POD_UID_LABEL] = pod_uid
        return list((await self.rt.ListPodSandbox(pb.ListPodSandboxRequest(filter=f), timeout=self.timeout)).items)

    async def list_containers(self, pod_uid: str | None = None) -> list[pb.Container]:
        f = pb.ContainerFilter()
        if pod_uid:
            f.label_selector[POD_UID_LABEL] = pod_uid
        return list((await self.rt.ListContainers(pb.ListContainersRequest(filter=f),
                                                  timeout=self.timeout)).containers)

    async def run_sandbox(self, config: pb.PodSandboxConfig) -> str:
        r = await self.rt.RunPodSandbox(pb.RunPodSandboxRequest(config=config), timeout=self.timeout)
        return r.pod_sandbox_id

    async def sandbox_status(self, sid: str) -> pb.PodSandboxStatus:
        r = await self.rt.PodSandboxStatus(pb.PodSandboxStatusRequest(pod_sandbox_id=sid), timeout=self.timeout)
        return r.status

    async def stop_sandbox(self, sid: str) -> None:
        await self.rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=sid), timeout=self.timeout)

    async def remove_sandbox(self, sid: str) -> None:
        await self.rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=sid), timeout=self.timeout)

    async def create_container(self, sid: str, config: pb.ContainerConfig, sandbox_config: pb.PodSandboxConfig) -> str:
        r = await self.rt.CreateContainer(pb.CreateContainerRequest(
            pod_sandbox_id=sid, config=config, sandbox_config=sandbox_config), timeout=self.timeout)
        return r.container_id

    async def start_container(self, cid: str) -> None:
        await self.rt.StartContainer(pb.StartContainerRequest(container_id=cid), timeout=self.timeout)

    async def stop_container(self, cid: str, grace: int) -> None:
        await self.rt.StopContainer(pb.StopContainerRequest(container_id=cid, timeout=grace),
                                    timeout=self.timeout + grace)

    async def remove_container(self, cid: str) -> None:
        await self.rt.RemoveContainer(pb.RemoveContainerRequest(container_id=cid), timeout=self.timeout)

    async def container_status(self, cid: str) -> pb.ContainerStatus:
        r = await self.rt.ContainerStatus(pb.ContainerStatusRequest(container_id=cid), timeout=self.timeout)
        return r.status

    async def exec_sync(self, cid: str, cmd: list[str], seconds: int = 0) -> pb.ExecSyncResponse:
        return await self.rt.ExecSync(pb.ExecSyncRequest(container_id=cid, cmd=cmd, timeout=seconds),
                                      timeout=self.timeout + seconds)

    async def exec_url(self, cid: str, cmd: list[str], tty: bool, stdin: bool, stdout: bool, stderr: bool) -> str:
        r = await self.rt.Exec(pb.ExecRequest(container_id=cid, cmd=cmd, tty=tty, stdin=stdin, stdout=stdout,
                                              stderr=stderr), timeout=self.timeout)
        return r.url

    async def attach_url(self, cid: str, tty: bool, stdin: bool, stdout: bool, stderr: bool) -> str:
        r = await self.rt.Attach(pb.AttachRequest(container_id=cid, tty=tty, stdin=stdin, stdout=stdout,
                                                  stderr=stderr), timeout=self.timeout)
        return r.url

    async def port_forward_url(self, sid: str, ports: list[int]) -> str:
        r = await self.rt.PortForward(pb.PortForwardRequest(pod_sandbox_id=sid, port=ports), timeout=self.timeout)
        return r.url

    async def list_container_stats(self) -> list[pb.ContainerStats]:
        r = await self.rt.ListContainerStats(pb.ListContainerStatsRequest(), timeout=self.timeout)
        return list(r.stats)

    async def list_sandbox_stats(self) -> list[pb.PodSandboxStats]:
        r = await self.rt.ListPodSandboxStats(pb.ListPodSandboxStatsRequest(), timeout=self.timeout)
        return list(r.stats)

    async def image_fs_info(self) -> pb.ImageFsInfoResponse:
        return await self.img.ImageFsInfo(pb.ImageFsInfoRequest(), timeout=self.timeout)

    def container_events(self):
        """The runtime's GetContainerEvents stream (an async iterator of ContainerEventResponse)."""
        return self.rt.GetContainerEvents(pb.GetEventsRequest())

    async def image_present(self, image: str) -> pb.Image | None:
        r = await self.img.ImageStatus(pb.ImageStatusRequest(image=pb.ImageSpec(image=image)), timeout=self.timeout)
        return r.image if r.HasField("image") and r.image.id else None

    async def pull_image(self, image: str) -> str:
        r = await self.img.PullImage(pb.PullImageRequest(image=pb.ImageSpec(image=image)), timeout=600)
        return r.image_ref


def is_not_found(e: BaseException) -> bool:
    return isinstance(e, grpc.aio.AioRpcError) and e.code() == grpc.StatusCode.NOT_FOUND


def is_unimplemented(e: BaseException) -> bool:
    return isinstance(e, grpc.aio.AioRpcError) and e.code() == grpc.StatusCode.UNIMPLEMENTED

"""The CRI client: every runtime.v1 verb over grpc.aio, and the one place its requests are built.

It speaks plain runtime.v1, so it works against our runtime and containerd alike. The verbs follow
the kubelet's own CRI client (k8s.io/cri-client): ids, lists and URLs come back unwrapped; status
verbs return the whole response (its verbose `info` is part of the answer); list filters are keyword
arguments named as the filter's fields. The kubelet awaits it; tests, benchmarks and tools call the
same verbs through `cri.client.sync.CRIClient`, without an event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc

from cri.client import in_process
from cri.proto import api_pb2 as pb
from cri.proto import api_pb2_grpc

# ListContainers/ListImages on a busy node exceed grpc's 4 MiB default, as kubelet found (it uses 16 MiB)
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 40 << 20)]
INFO_TIMEOUT = 5.0  # Version and Status: the runtime answers them from memory
PULL_TIMEOUT = 600.0
Labels = Mapping[str, str] | None


def endpoint_target(endpoint: str) -> str:
    """`unix:///run/x.sock`, `unix:/x` or a bare path → a grpc target."""
    if endpoint.startswith("unix:"):
        return endpoint
    return f"unix://{endpoint}"


def is_not_found(e: BaseException) -> bool:
    return isinstance(e, grpc.RpcError) and e.code() == grpc.StatusCode.NOT_FOUND


def is_unimplemented(e: BaseException) -> bool:
    return isinstance(e, grpc.RpcError) and e.code() == grpc.StatusCode.UNIMPLEMENTED


def _labels(msg: Any, label_selector: Labels) -> None:
    if label_selector:
        msg.label_selector.update(label_selector)


class RuntimeClient:
    """RuntimeService and ImageService over one channel; `timeout` is each call's deadline in seconds.
    When the runtime serving `endpoint` lives in this process (`nodeagent up`), the unary verbs call it
    directly (`cri.client.in_process`); the channel then carries only GetContainerEvents.

    The verbs await only their stubs' calls and `_sleep`, so `cri.client.sync` can run the very same
    verbs over generated sync stubs whose calls are already resolved (see there)."""

    def __init__(self, endpoint: str, timeout: float = 120.0) -> None:
        self.channel: Any = grpc.aio.insecure_channel(endpoint_target(endpoint), options=CHANNEL_OPTIONS)
        self._rt: Any = api_pb2_grpc.RuntimeServiceStub(self.channel)
        self._img: Any = api_pb2_grpc.ImageServiceStub(self.channel)
        # checked once: the runtime starts first
        self.in_process = in_process.servers.lookup(endpoint) is not None
        if self.in_process:
            self._rt = in_process.LocalStub(in_process.RUNTIME, endpoint, self._rt)
            self._img = in_process.LocalStub(in_process.IMAGES, endpoint, self._img)
        self._sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
        self.timeout = timeout

    @classmethod
    def over(cls, runtime_stub: Any, image_stub: Any, timeout: float,
             sleep: Callable[[float], Awaitable[Any]]) -> RuntimeClient:
        """The verbs over stubs and a sleep of the caller's (cri.client.sync); no channel of its own."""
        self = cls.__new__(cls)
        self.channel, self.in_process = None, False
        self._rt, self._img, self._sleep, self.timeout = runtime_stub, image_stub, sleep, timeout
        return self

    async def close(self) -> None:
        await self.channel.close()

    async def __aenter__(self) -> RuntimeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the runtime itself ------------------------------------------------------------------------
    async def version(self, api_version: str = "v1") -> pb.VersionResponse:
        return await self._rt.Version(pb.VersionRequest(version=api_version), timeout=INFO_TIMEOUT)

    async def wait_ready(self, deadline_s: float = 30.0) -> pb.VersionResponse:
        """Version, retried until the runtime answers or `deadline_s` passed (then its error)."""
        end = time.monotonic() + deadline_s
        while True:
            try:
                return await self.version()
            except grpc.RpcError:
                if time.monotonic() > end:
                    raise
                await self._sleep(0.05)

    async def status(self, verbose: bool = False) -> pb.StatusResponse:
        return await self._rt.Status(pb.StatusRequest(verbose=verbose), timeout=INFO_TIMEOUT)

    async def runtime_config(self) -> pb.RuntimeConfigResponse:
        return await self._rt.RuntimeConfig(pb.RuntimeConfigRequest(), timeout=self.timeout)

    async def update_runtime_config(self, pod_cidr: str) -> None:
        """Tell the runtime the node's podCIDR (the kubelet's updatePodCIDR)."""
        req = pb.UpdateRuntimeConfigRequest()
        req.runtime_config.network_config.pod_cidr = pod_cidr
        await self._rt.UpdateRuntimeConfig(req, timeout=INFO_TIMEOUT)

    # -- pod sandboxes -----------------------------------------------------------------------------
    async def run_pod_sandbox(self, config: pb.PodSandboxConfig, runtime_handler: str = "") -> str:
        req = pb.RunPodSandboxRequest(config=config, runtime_handler=runtime_handler)
        r = await self._rt.RunPodSandbox(req, timeout=self.timeout)
        return r.pod_sandbox_id

    async def stop_pod_sandbox(self, sid: str) -> None:
        await self._rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=sid), timeout=self.timeout)

    async def remove_pod_sandbox(self, sid: str) -> None:
        await self._rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=sid), timeout=self.timeout)

    async def pod_sandbox_status(self, sid: str, verbose: bool = False) -> pb.PodSandboxStatusResponse:
        req = pb.PodSandboxStatusRequest(pod_sandbox_id=sid, verbose=verbose)
        return await self._rt.PodSandboxStatus(req, timeout=self.timeout)

    async def list_pod_sandbox(self, *, id: str = "", state: pb.PodSandboxState | None = None,
                               label_selector: Labels = None) -> list[pb.PodSandbox]:
        req = pb.ListPodSandboxRequest()
        if id or state is not None or label_selector:
            req.filter.id = id
            if state is not None:
                req.filter.state.state = state
            _labels(req.filter, label_selector)
        return list((await self._rt.ListPodSandbox(req, timeout=self.timeout)).items)

    # -- containers --------------------------------------------------------------------------------
    async def create_container(self, sid: str, config: pb.ContainerConfig,
                               sandbox_config: pb.PodSandboxConfig) -> str:
        r = await self._rt.CreateContainer(pb.CreateContainerRequest(
            pod_sandbox_id=sid, config=config, sandbox_config=sandbox_config), timeout=self.timeout)
        return r.container_id

    async def start_container(self, cid: str) -> None:
        await self._rt.StartContainer(pb.StartContainerRequest(container_id=cid), timeout=self.timeout)

    async def stop_container(self, cid: str, grace: int = 0) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds (the request's timeout; the call's deadline grows
        by as much)."""
        await self._rt.StopContainer(pb.StopContainerRequest(container_id=cid, timeout=grace),
                                     timeout=self.timeout + grace)

    async def remove_container(self, cid: str) -> None:
        await self._rt.RemoveContainer(pb.RemoveContainerRequest(container_id=cid), timeout=self.timeout)

    async def list_containers(self, *, id: str = "", pod_sandbox_id: str = "",
                              state: pb.ContainerState | None = None,
                              label_selector: Labels = None) -> list[pb.Container]:
        req = pb.ListContainersRequest()
        if id or pod_sandbox_id or state is not None or label_selector:
            req.filter.id, req.filter.pod_sandbox_id = id, pod_sandbox_id
            if state is not None:
                req.filter.state.state = state
            _labels(req.filter, label_selector)
        return list((await self._rt.ListContainers(req, timeout=self.timeout)).containers)

    async def container_status(self, cid: str, verbose: bool = False) -> pb.ContainerStatusResponse:
        return await self._rt.ContainerStatus(pb.ContainerStatusRequest(container_id=cid, verbose=verbose),
                                              timeout=self.timeout)

    async def wait_container_state(self, cid: str, state: pb.ContainerState,
                                   deadline_s: float = 30.0) -> pb.ContainerStatus:
        """The container's status once it is in `state`, or the last one seen when `deadline_s` passed."""
        end = time.monotonic() + deadline_s
        while True:
            st = (await self.container_status(cid)).status
            if st.state == state or time.monotonic() > end:
                return st
            await self._sleep(0.05)

    async def update_container_resources(self, cid: str, linux: pb.LinuxContainerResources) -> None:
        await self._rt.UpdateContainerResources(
            pb.UpdateContainerResourcesRequest(container_id=cid, linux=linux), timeout=self.timeout)

    async def reopen_container_log(self, cid: str) -> None:
        await self._rt.ReopenContainerLog(pb.ReopenContainerLogRequest(container_id=cid),
                                          timeout=self.timeout)

    async def checkpoint_container(self, cid: str, location: str = "", timeout_s: int = 0) -> None:
        await self._rt.CheckpointContainer(
            pb.CheckpointContainerRequest(container_id=cid, location=location, timeout=timeout_s),
            timeout=self.timeout + timeout_s)

    # -- exec, attach, port-forward ----------------------------------------------------------------
    async def exec_sync(self, cid: str, cmd: list[str], timeout_s: int = 0) -> pb.ExecSyncResponse:
        """Run cmd in the container and wait (at most `timeout_s` seconds when set) for its output."""
        return await self._rt.ExecSync(pb.ExecSyncRequest(container_id=cid, cmd=cmd, timeout=timeout_s),
                                       timeout=self.timeout + timeout_s)

    async def exec(self, cid: str, cmd: list[str], *, tty: bool = False, stdin: bool = False,
                   stdout: bool = False, stderr: bool = False) -> str:
        """The one-time streaming URL of an exec session."""
        r = await self._rt.Exec(pb.ExecRequest(container_id=cid, cmd=cmd, tty=tty, stdin=stdin,
                                               stdout=stdout, stderr=stderr), timeout=self.timeout)
        return r.url

    async def attach(self, cid: str, *, tty: bool = False, stdin: bool = False, stdout: bool = False,
                     stderr: bool = False) -> str:
        """The one-time streaming URL of an attach session."""
        r = await self._rt.Attach(pb.AttachRequest(container_id=cid, tty=tty, stdin=stdin, stdout=stdout,
                                                   stderr=stderr), timeout=self.timeout)
        return r.url

    async def port_forward(self, sid: str, ports: list[int] | None = None) -> str:
        """The one-time streaming URL of a port-forward session."""
        r = await self._rt.PortForward(pb.PortForwardRequest(pod_sandbox_id=sid, port=ports or []),
                                       timeout=self.timeout)
        return r.url

    # -- stats and events --------------------------------------------------------------------------
    async def container_stats(self, cid: str) -> pb.ContainerStats:
        r = await self._rt.ContainerStats(pb.ContainerStatsRequest(container_id=cid), timeout=self.timeout)
        return r.stats

    async def list_container_stats(self, *, id: str = "", pod_sandbox_id: str = "",
                                   label_selector: Labels = None) -> list[pb.ContainerStats]:
        req = pb.ListContainerStatsRequest()
        if id or pod_sandbox_id or label_selector:
            req.filter.id, req.filter.pod_sandbox_id = id, pod_sandbox_id
            _labels(req.filter, label_selector)
        return list((await self._rt.ListContainerStats(req, timeout=self.timeout)).stats)

    async def pod_sandbox_stats(self, sid: str) -> pb.PodSandboxStats:
        r = await self._rt.PodSandboxStats(pb.PodSandboxStatsRequest(pod_sandbox_id=sid),
                                           timeout=self.timeout)
        return r.stats

    async def list_pod_sandbox_stats(self, *, id: str = "",
                                     label_selector: Labels = None) -> list[pb.PodSandboxStats]:
        req = pb.ListPodSandboxStatsRequest()
        if id or label_selector:
            req.filter.id = id
            _labels(req.filter, label_selector)
        return list((await self._rt.ListPodSandboxStats(req, timeout=self.timeout)).stats)

    async def list_metric_descriptors(self) -> list[pb.MetricDescriptor]:
        r = await self._rt.ListMetricDescriptors(pb.ListMetricDescriptorsRequest(), timeout=self.timeout)
        return list(r.descriptors)

    async def list_pod_sandbox_metrics(self) -> list[pb.PodSandboxMetrics]:
        r = await self._rt.ListPodSandboxMetrics(pb.ListPodSandboxMetricsRequest(), timeout=self.timeout)
        return list(r.pod_metrics)

    def get_container_events(self) -> Any:
        """The runtime's GetContainerEvents stream of ContainerEventResponse, with cancel() (no deadline:
        it lasts as long as the caller follows it); an async iterator here, a blocking one through the
        sync client."""
        return self._rt.GetContainerEvents(pb.GetEventsRequest())

    # -- images ------------------------------------------------------------------------------------
    async def list_images(self, image: str = "") -> list[pb.Image]:
        req = pb.ListImagesRequest()
        if image:
            req.filter.image.image = image
        return list((await self._img.ListImages(req, timeout=self.timeout)).images)

    async def image_status(self, image: str, verbose: bool = False) -> pb.ImageStatusResponse:
        """The image's status; its `image` field is unset when the runtime does not have it."""
        req = pb.ImageStatusRequest(image=pb.ImageSpec(image=image), verbose=verbose)
        return await self._img.ImageStatus(req, timeout=self.timeout)

    async def pull_image(self, image: str, *, auth: pb.AuthConfig | None = None,
                         sandbox_config: pb.PodSandboxConfig | None = None,
                         deadline: float = PULL_TIMEOUT) -> str:
        """Pull and return the image's reference (its id); `deadline` in seconds."""
        req = pb.PullImageRequest(image=pb.ImageSpec(image=image), auth=auth, sandbox_config=sandbox_config)
        r = await self._img.PullImage(req, timeout=deadline)
        return r.image_ref

    async def remove_image(self, image: str) -> None:
        await self._img.RemoveImage(pb.RemoveImageRequest(image=pb.ImageSpec(image=image)),
                                    timeout=self.timeout)

    async def image_fs_info(self) -> pb.ImageFsInfoResponse:
        return await self._img.ImageFsInfo(pb.ImageFsInfoRequest(), timeout=self.timeout)

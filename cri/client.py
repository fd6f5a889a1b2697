"""A small synchronous CRI client over the project's proto, shared by tests, benchmarks and tools.

It speaks plain runtime.v1 and works against any CRI runtime (ours, containerd).
"""

from __future__ import annotations

import time

import grpc

from cri.proto import api_pb2 as pb
from cri.proto import api_pb2_grpc

# ListContainers/ListImages on a busy node exceed grpc's 4 MiB default, as kubelet found (it uses 16 MiB)
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 40 << 20)]


def endpoint_target(endpoint: str) -> str:
    """`unix:///run/x.sock`, `unix:/x` or a bare path → a grpc target."""
    if endpoint.startswith("unix:"):
        return endpoint
    return f"unix://{endpoint}"


class CRIClient:
    def __init__(self, socket: str, timeout: float = 120.0) -> None:
        self.channel = grpc.insecure_channel(endpoint_target(socket), options=CHANNEL_OPTIONS)
        self.rt = api_pb2_grpc.RuntimeServiceStub(self.channel)
        self.img = api_pb2_grpc.ImageServiceStub(self.channel)
        self.timeout = timeout

    def close(self) -> None:
        self.channel.close()

    def wait_ready(self, deadline_s: float = 30.0) -> pb.VersionResponse:
        end = time.monotonic() + deadline_s
        while True:
            try:
                return self.rt.Version(pb.VersionRequest(version="v1"), timeout=2)
            except grpc.RpcError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)

    # -- conveniences used by tests and the benchmark ------------------------------------------
    def run_sandbox(self, config: pb.PodSandboxConfig, handler: str = "") -> str:
        return self.rt.RunPodSandbox(pb.RunPodSandboxRequest(config=config, runtime_handler=handler),
                                     timeout=self.timeout).pod_sandbox_id

    def create(self, sandbox_id: str, config: pb.ContainerConfig, sandbox_config: pb.PodSandboxConfig) -> str:
        return self.rt.CreateContainer(pb.CreateContainerRequest(
            pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox_config), timeout=self.timeout).container_id

    def start(self, cid: str) -> None:
        self.rt.StartContainer(pb.StartContainerRequest(container_id=cid), timeout=self.timeout)

    def stop(self, cid: str, timeout: int = 0) -> None:
        self.rt.StopContainer(pb.StopContainerRequest(container_id=cid, timeout=timeout), timeout=self.timeout + timeout)

    def remove(self, cid: str) -> None:
        self.rt.RemoveContainer(pb.RemoveContainerRequest(container_id=cid), timeout=self.timeout)

    def status(self, cid: str, verbose: bool = False) -> pb.ContainerStatusResponse:
        return self.rt.ContainerStatus(pb.ContainerStatusRequest(container_id=cid, verbose=verbose), timeout=self.timeout)

    def sandbox_status(self, sid: str, verbose: bool = False) -> pb.PodSandboxStatusResponse:
        return self.rt.PodSandboxStatus(pb.PodSandboxStatusRequest(pod_sandbox_id=sid, verbose=verbose),
                                        timeout=self.timeout)

    def stop_sandbox(self, sid: str) -> None:
        self.rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=sid), timeout=self.timeout)

    def remove_sandbox(self, sid: str) -> None:
        self.rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=sid), timeout=self.timeout)

    def exec_sync(self, cid: str, cmd: list[str], timeout: int = 0) -> pb.ExecSyncResponse:
        return self.rt.ExecSync(pb.ExecSyncRequest(container_id=cid, cmd=cmd, timeout=timeout),
                                timeout=self.timeout + timeout)

    def wait_state(self, cid: str, state: int, deadline_s: float = 30.0) -> pb.ContainerStatus:
        end = time.monotonic() + deadline_s
        while True:
            st = self.status(cid).status
            if st.state == state or time.monotonic() > end:
                return st
            time.sleep(0.05)


def sandbox_config(name: str, namespace: str = "default", uid: str = "", attempt: int = 0, *,
                   hostname: str = "", log_dir: str = "", cgroup_parent: str = "",
                   host_network: bool = False, share_pid: bool = False,
                   labels: dict[str, str] | None = None) -> pb.PodSandboxConfig:
    # kubelet leaves the hostname empty for host-network pods (they use the node's UTS namespace)
    cfg = pb.PodSandboxConfig(hostname="" if host_network else (hostname or name), log_directory=log_dir)
    cfg.metadata.name, cfg.metadata.namespace = name, namespace
    cfg.metadata.uid, cfg.metadata.attempt = uid or f"uid-{name}", attempt
    cfg.labels.update(labels or {})
    cfg.linux.cgroup_parent = cgroup_parent
    nso = cfg.linux.security_context.namespace_options
    nso.network = pb.NODE if host_network else pb.POD
    nso.pid = pb.POD if share_pid else pb.CONTAINER
    return cfg


def container_config(name: str, image: str, command: list[str] | None = None, args: list[str] | None = None, *,
                     log_path: str = "", attempt: int = 0, envs: dict[str, str] | None = None,
                     labels: dict[str, str] | None = None) -> pb.ContainerConfig:
    cfg = pb.ContainerConfig(command=command or [], args=args or [], log_path=log_path)
    cfg.metadata.name, cfg.metadata.attempt = name, attempt
    cfg.image.image = image
    for k, v in (envs or {}).items():
        cfg.envs.add(key=k, value=v)
    cfg.labels.update(labels or {})
    cfg.linux.security_context.namespace_options.pid = pb.CONTAINER
    return cfg

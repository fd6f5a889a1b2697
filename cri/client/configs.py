"""Minimal PodSandboxConfig and ContainerConfig messages, as tests, benchmarks and tools ask for them."""

from __future__ import annotations

from cri.proto import api_pb2 as pb


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


def container_config(name: str, image: str, command: list[str] | None = None,
                     args: list[str] | None = None, *,
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

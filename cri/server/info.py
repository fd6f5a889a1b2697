"""Version, Status, RuntimeConfig, UpdateRuntimeConfig, GetContainerEvents, and the verbs answered
UNIMPLEMENTED (checkpointing, pod metrics)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from cni.invoke import NOT_INITIALIZED, NoNetworkConfig
from cri.proto import api_pb2 as pb
from cri.runtime.core import HANDLERS
from cri.runtime.errors import Unimplemented
from cri.server.boundary import rpc
from kernel import syscalls as sc

if TYPE_CHECKING:
    from cri.runtime.service import Runtime

RUNTIME_NAME = "nodeagent"
RUNTIME_API_VERSION = "v1"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("nodeagent")
    except Exception:
        return "0.1.0"


class InfoVerbs:
    runtime: Runtime

    @rpc
    async def Version(self, request, context):
        return pb.VersionResponse(version="0.1.0", runtime_name=RUNTIME_NAME, runtime_version=_version(),
                                  runtime_api_version=RUNTIME_API_VERSION)

    @rpc
    async def Status(self, request, context):
        rt = self.runtime
        resp = pb.StatusResponse()
        resp.status.conditions.add(type="RuntimeReady", status=True)
        net = rt.cni.network() if rt.cni is not None else None
        if net is not None:
            resp.status.conditions.add(type="NetworkReady", status=True)
        else:  # containerd's words: its Status over go-cni's ErrCNINotInitialized
            resp.status.conditions.add(type="NetworkReady", status=False, reason="NetworkPluginNotReady",
                                       message=f"Network plugin returns error: {NOT_INITIALIZED}")
        for name in HANDLERS:  # "" is the default handler (what a pod without a RuntimeClass gets)
            h = resp.runtime_handlers.add(name=name)
            h.features.recursive_read_only_mounts = sc.supports_mount_setattr()
            h.features.user_namespaces = False
        resp.features.supplemental_groups_policy = True
        if request.verbose:
            resp.info["config"] = json.dumps({"stateDir": str(rt.opts.state_dir),
                                              "cniConfDir": rt.opts.cni_conf_dir,
                                              "cniBinDirs": list(rt.opts.cni_bin_dirs),
                                              "cgroups": rt.cgroups.version,
                                              "podCIDR": rt.pod_cidr,
                                              "network": net.name if net is not None else None})
            # containerd's last config load: "OK", or go-cni's load error wrapped as its Load wraps it
            resp.info["lastCNILoadStatus"] = "OK" if net is not None else (
                f"cni config load failed: {NoNetworkConfig(rt.opts.cni_conf_dir)}: failed to load cni config")
        return resp

    @rpc
    async def RuntimeConfig(self, request, context):
        return pb.RuntimeConfigResponse(linux=pb.LinuxRuntimeConfiguration(cgroup_driver=pb.CGROUPFS))

    @rpc
    async def UpdateRuntimeConfig(self, request, context):
        self.runtime.pod_cidr = request.runtime_config.network_config.pod_cidr
        return pb.UpdateRuntimeConfigResponse()

    async def GetContainerEvents(self, request, context):
        async for ev in self.runtime.events():
            yield ev

    @rpc
    async def CheckpointContainer(self, request, context):
        raise Unimplemented("container checkpointing (CRIU) is not supported by this runtime")

    @rpc
    async def ListMetricDescriptors(self, request, context):
        raise Unimplemented("pod sandbox metrics are not served; use ListPodSandboxStats")

    @rpc
    async def ListPodSandboxMetrics(self, request, context):
        raise Unimplemented("pod sandbox metrics are not served; use ListPodSandboxStats")

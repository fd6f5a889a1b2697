"""node-driver-registrar's part: tell the kubelet about a CSI driver through its plugin watcher.

A `pluginregistration.Registration` server on `<kubelet root>/plugins_registry/<driver>-reg.sock`: the
kubelet's plugin watcher sees the socket appear, calls GetInfo (type CSIPlugin, the driver's name, the
driver's own socket, the CSI versions it speaks) and answers with NotifyRegistrationStatus, which is
logged (a refusal names the kubelet's reason). Removing the socket unregisters the driver.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import grpc

from csi.proto import pluginregistration_pb2 as rpb
from csi.proto import pluginregistration_pb2_grpc as rgrpc

log = logging.getLogger("nodeagent.csi.registrar")

CSI_PLUGIN = "CSIPlugin"
SUPPORTED_VERSIONS = ("1.0.0",)  # what the kubelet's CSI plugin accepts (csi_plugin.go: ">= 1.0.0")


def registration_socket(registry_dir: str, driver_name: str) -> str:
    """node-driver-registrar's name for the socket: `<dir>/<driver>-reg.sock`."""
    return str(Path(registry_dir) / f"{driver_name}-reg.sock")


class Registration(rgrpc.RegistrationServicer):
    def __init__(self, driver_name: str, endpoint: str) -> None:
        self.driver_name = driver_name
        self.endpoint = endpoint
        self.registered = asyncio.Event()
        self.error = ""

    async def GetInfo(self, request: rpb.InfoRequest, context: object) -> rpb.PluginInfo:
        return rpb.PluginInfo(type=CSI_PLUGIN, name=self.driver_name, endpoint=self.endpoint,
                              supported_versions=list(SUPPORTED_VERSIONS))

    async def NotifyRegistrationStatus(self, request: rpb.RegistrationStatus, context: object
                                       ) -> rpb.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("csi: the kubelet registered driver %s (%s)", self.driver_name, self.endpoint)
            self.error = ""
            self.registered.set()
        else:
            self.error = request.error
            log.error("csi: the kubelet refused driver %s: %s; fix that and restart the driver",
                      self.driver_name, request.error)
        return rpb.RegistrationStatusResponse()


async def start(path: str, driver_name: str, endpoint: str) -> tuple[grpc.aio.Server, Registration]:
    """Serve the registration socket at `path` (after the driver's own socket is up, as the registrar
    waits for it); the kubelet finds it there."""
    from csi.driver.server import prepare_socket

    await asyncio.to_thread(prepare_socket, path)
    servicer = Registration(driver_name, endpoint)
    server = grpc.aio.server()
    rgrpc.add_RegistrationServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    os.chmod(path, 0o600)
    return server, servicer

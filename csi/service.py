"""The `csi` component: the hostpath driver on its socket, registered with the kubelet, until cancelled.

`serve(config, ready)` is the body of `nodeagent csi` and a component of `up`/`agent`. The driver's
records are on disk, so a restart keeps every volume, and mounts stay where they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from csi.config import CSIConfig

log = logging.getLogger("nodeagent.csi")
MAX_SOCKET_PATH = 107  # sizeof(sockaddr_un.sun_path) - 1


async def serve(config: CSIConfig, ready: asyncio.Event) -> None:
    from csi import registrar
    from csi.driver import server
    from csi.driver.hostpath import Config, HostPath

    too_long = [p for p in (config.socket, config.registration_socket) if len(p.encode()) > MAX_SOCKET_PATH]
    if too_long:
        # a node runs on without the driver (its CSI volumes wait with FailedMount), as with a missing part
        log.error("CSI driver %s not started: the socket path %s is longer than a unix socket's %d bytes; "
                  "use a shorter --data-dir", config.driver_name, too_long[0], MAX_SOCKET_PATH)
        ready.set()
        await asyncio.Event().wait()
    driver = await asyncio.to_thread(HostPath, Config(
        name=config.driver_name, node_id=config.node_id, root=config.state_dir,
        max_volumes_per_node=config.max_volumes_per_node, capacity=config.capacity))
    grpc_server = await server.start(driver, config.socket)
    reg = None
    try:
        if config.registration_socket:
            reg, _ = await registrar.start(config.registration_socket, config.driver_name, config.socket)
        log.info("CSI driver %s serving on unix://%s (node %s, volumes in %s)%s", config.driver_name,
                 config.socket, config.node_id, config.state_dir,
                 f", registered through {config.registration_socket}" if reg else "")
        ready.set()
        await grpc_server.wait_for_termination()
    finally:
        for s, path in ((reg, config.registration_socket), (grpc_server, config.socket)):
            if s is None:
                continue
            with contextlib.suppress(Exception):
                await asyncio.shield(s.stop(grace=1))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

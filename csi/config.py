"""The `csi` component's config (built by `nodeagent csi` and by `up`/`agent` from the node's layout)."""

from __future__ import annotations

import dataclasses

DRIVER_NAME = "hostpath.csi.nodeagent.io"


@dataclasses.dataclass(frozen=True)
class CSIConfig:
    node_id: str  # the node's name: the driver's NodeGetInfo node_id and its topology segment
    state_dir: str  # volumes, snapshots, state.json
    socket: str  # the driver's CSI endpoint (unix socket path)
    # the registration socket in the kubelet's plugins_registry dir; "" registers nowhere
    registration_socket: str = ""
    driver_name: str = DRIVER_NAME
    max_volumes_per_node: int = 0
    capacity: int = 0  # bytes in all (0: the free space of the state dir's filesystem)

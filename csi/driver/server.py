"""The driver's one gRPC boundary: csi.v1 Identity, Controller and Node on a unix socket.

Each RPC turns its request into plain values, runs the core (`HostPath`, blocking) on a worker thread,
and builds the response; `CSIError` becomes the status with its code, anything else INTERNAL with the
error named, and every call is logged with its outcome. Nothing here decides anything.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import stat
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf import timestamp_pb2, wrappers_pb2

from csi.driver.errors import CSIError
from csi.driver.hostpath import Capability, HostPath, Stats
from csi.driver.state import Snapshot, Volume
from csi.proto import csi_pb2 as pb
from csi.proto import csi_pb2_grpc

log = logging.getLogger("nodeagent.csi")

VENDOR_VERSION = "0.1.0"
T = TypeVar("T")

Mode = pb.VolumeCapability.AccessMode.Mode
CtrlRPC = pb.ControllerServiceCapability.RPC.Type
NodeRPC = pb.NodeServiceCapability.RPC.Type

CONTROLLER_CAPS = (CtrlRPC.CREATE_DELETE_VOLUME, CtrlRPC.CREATE_DELETE_SNAPSHOT, CtrlRPC.LIST_SNAPSHOTS,
                   CtrlRPC.LIST_VOLUMES, CtrlRPC.GET_CAPACITY, CtrlRPC.CLONE_VOLUME, CtrlRPC.EXPAND_VOLUME)
NODE_CAPS = (NodeRPC.STAGE_UNSTAGE_VOLUME, NodeRPC.GET_VOLUME_STATS, NodeRPC.EXPAND_VOLUME,
             NodeRPC.SINGLE_NODE_MULTI_WRITER)


def rpc(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Log the call and map the core's errors to gRPC statuses (the only place that does)."""

    @functools.wraps(fn)
    async def wrapped(self: Any, request: Any, context: grpc.aio.ServicerContext) -> T:
        start = time.monotonic()
        try:
            out = await fn(self, request, context)
        except CSIError as e:
            log.info("csi %s: %s %s", fn.__name__, e.code, e.message)
            await context.abort(grpc.StatusCode[e.code], e.message)
        except Exception as e:
            log.exception("csi %s failed", fn.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"{fn.__name__}: {type(e).__name__}: {e}")
        log.debug("csi %s ok in %.1f ms", fn.__name__, (time.monotonic() - start) * 1000)
        return out

    return wrapped


def capability(c: pb.VolumeCapability) -> Capability:
    kind = c.WhichOneof("access_type") or ""
    mount = c.mount if kind == "mount" else None
    return Capability(access_type=kind, access_mode=Mode.Name(c.access_mode.mode),
                      fs_type=mount.fs_type if mount else "",
                      mount_flags=tuple(mount.mount_flags) if mount else ())


def optional_capability(request: Any) -> Capability | None:
    return capability(request.volume_capability) if request.HasField("volume_capability") else None


def volume_message(h: HostPath, v: Volume) -> pb.Volume:
    out = pb.Volume(volume_id=v.id, capacity_bytes=v.capacity, volume_context=v.parameters,
                    accessible_topology=[pb.Topology(segments=h.topology)])
    if v.source_snapshot:
        out.content_source.snapshot.snapshot_id = v.source_snapshot
    elif v.source_volume:
        out.content_source.volume.volume_id = v.source_volume
    return out


def snapshot_message(s: Snapshot) -> pb.Snapshot:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(s.created * 1e9))
    return pb.Snapshot(snapshot_id=s.id, source_volume_id=s.source_volume, size_bytes=s.size,
                       creation_time=ts, ready_to_use=True)


def stats_message(s: Stats) -> pb.NodeGetVolumeStatsResponse:
    U = pb.VolumeUsage
    return pb.NodeGetVolumeStatsResponse(usage=[
        U(unit=U.BYTES, total=s.total, available=s.available, used=s.used),
        U(unit=U.INODES, total=s.inodes, available=s.inodes_free, used=s.inodes_used)])


class Identity(csi_pb2_grpc.IdentityServicer):
    def __init__(self, driver: HostPath) -> None:
        self.driver = driver

    @rpc
    async def GetPluginInfo(self, request: pb.GetPluginInfoRequest, context: Any) -> pb.GetPluginInfoResponse:
        return pb.GetPluginInfoResponse(name=self.driver.config.name, vendor_version=VENDOR_VERSION)

    @rpc
    async def GetPluginCapabilities(self, request: Any, context: Any) -> pb.GetPluginCapabilitiesResponse:
        S = pb.PluginCapability.Service
        return pb.GetPluginCapabilitiesResponse(capabilities=[
            pb.PluginCapability(service=S(type=t))
            for t in (S.CONTROLLER_SERVICE, S.VOLUME_ACCESSIBILITY_CONSTRAINTS)])

    @rpc
    async def Probe(self, request: pb.ProbeRequest, context: Any) -> pb.ProbeResponse:
        ready = await asyncio.to_thread(self.driver.probe)
        return pb.ProbeResponse(ready=wrappers_pb2.BoolValue(value=ready))


class Controller(csi_pb2_grpc.ControllerServicer):
    def __init__(self, driver: HostPath) -> None:
        self.driver = driver

    @rpc
    async def ControllerGetCapabilities(self, request: Any, context: Any
                                        ) -> pb.ControllerGetCapabilitiesResponse:
        C = pb.ControllerServiceCapability
        return pb.ControllerGetCapabilitiesResponse(
            capabilities=[C(rpc=C.RPC(type=t)) for t in CONTROLLER_CAPS])

    @rpc
    async def CreateVolume(self, request: pb.CreateVolumeRequest, context: Any) -> pb.CreateVolumeResponse:
        src = request.volume_content_source
        kind = src.WhichOneof("type") if request.HasField("volume_content_source") else None
        reqs = request.accessibility_requirements
        vol = await asyncio.to_thread(
            self.driver.create_volume, request.name, [capability(c) for c in request.volume_capabilities],
            request.capacity_range.required_bytes, request.capacity_range.limit_bytes,
            dict(request.parameters), snapshot_id=src.snapshot.snapshot_id if kind == "snapshot" else "",
            source_volume_id=src.volume.volume_id if kind == "volume" else "",
            requisite=[dict(t.segments) for t in reqs.requisite])
        return pb.CreateVolumeResponse(volume=volume_message(self.driver, vol))

    @rpc
    async def DeleteVolume(self, request: pb.DeleteVolumeRequest, context: Any) -> pb.DeleteVolumeResponse:
        await asyncio.to_thread(self.driver.delete_volume, request.volume_id)
        return pb.DeleteVolumeResponse()

    @rpc
    async def ValidateVolumeCapabilities(self, request: pb.ValidateVolumeCapabilitiesRequest, context: Any
                                         ) -> pb.ValidateVolumeCapabilitiesResponse:
        why = await asyncio.to_thread(self.driver.validate_capabilities, request.volume_id,
                                      [capability(c) for c in request.volume_capabilities])
        if why:
            return pb.ValidateVolumeCapabilitiesResponse(message=why)
        R = pb.ValidateVolumeCapabilitiesResponse
        return R(confirmed=R.Confirmed(volume_context=request.volume_context,
                                       volume_capabilities=request.volume_capabilities,
                                       parameters=request.parameters))

    @rpc
    async def ListVolumes(self, request: pb.ListVolumesRequest, context: Any) -> pb.ListVolumesResponse:
        vols, token = await asyncio.to_thread(self.driver.list_volumes, request.starting_token,
                                              request.max_entries)
        E = pb.ListVolumesResponse.Entry
        return pb.ListVolumesResponse(entries=[E(volume=volume_message(self.driver, v)) for v in vols],
                                      next_token=token)

    @rpc
    async def GetCapacity(self, request: pb.GetCapacityRequest, context: Any) -> pb.GetCapacityResponse:
        topology = dict(request.accessible_topology.segments) \
            if request.HasField("accessible_topology") else None
        available, maximum = await asyncio.to_thread(self.driver.get_capacity, topology)
        return pb.GetCapacityResponse(available_capacity=available,
                                      maximum_volume_size=wrappers_pb2.Int64Value(value=maximum))

    @rpc
    async def ControllerExpandVolume(self, request: pb.ControllerExpandVolumeRequest, context: Any
                                     ) -> pb.ControllerExpandVolumeResponse:
        if not request.volume_id:
            raise CSIError("INVALID_ARGUMENT", "volume_id missing in request")
        if not request.HasField("capacity_range"):
            raise CSIError("INVALID_ARGUMENT", "capacity_range missing in request")
        size = await asyncio.to_thread(self.driver.expand_volume, request.volume_id,
                                       request.capacity_range.required_bytes,
                                       request.capacity_range.limit_bytes)
        # a directory has no filesystem to grow on the node
        return pb.ControllerExpandVolumeResponse(capacity_bytes=size, node_expansion_required=False)

    @rpc
    async def CreateSnapshot(self, request: pb.CreateSnapshotRequest, context: Any
                             ) -> pb.CreateSnapshotResponse:
        snap = await asyncio.to_thread(self.driver.create_snapshot, request.name, request.source_volume_id)
        return pb.CreateSnapshotResponse(snapshot=snapshot_message(snap))

    @rpc
    async def DeleteSnapshot(self, request: pb.DeleteSnapshotRequest, context: Any
                             ) -> pb.DeleteSnapshotResponse:
        await asyncio.to_thread(self.driver.delete_snapshot, request.snapshot_id)
        return pb.DeleteSnapshotResponse()

    @rpc
    async def ListSnapshots(self, request: pb.ListSnapshotsRequest, context: Any) -> pb.ListSnapshotsResponse:
        snaps, token = await asyncio.to_thread(self.driver.list_snapshots, request.snapshot_id,
                                               request.source_volume_id, request.starting_token,
                                               request.max_entries)
        E = pb.ListSnapshotsResponse.Entry
        return pb.ListSnapshotsResponse(entries=[E(snapshot=snapshot_message(s)) for s in snaps],
                                        next_token=token)


class Node(csi_pb2_grpc.NodeServicer):
    def __init__(self, driver: HostPath) -> None:
        self.driver = driver

    @rpc
    async def NodeGetCapabilities(self, request: Any, context: Any) -> pb.NodeGetCapabilitiesResponse:
        C = pb.NodeServiceCapability
        return pb.NodeGetCapabilitiesResponse(capabilities=[C(rpc=C.RPC(type=t)) for t in NODE_CAPS])

    @rpc
    async def NodeGetInfo(self, request: Any, context: Any) -> pb.NodeGetInfoResponse:
        c = self.driver.config
        return pb.NodeGetInfoResponse(node_id=c.node_id, max_volumes_per_node=c.max_volumes_per_node,
                                      accessible_topology=pb.Topology(segments=self.driver.topology))

    @rpc
    async def NodeStageVolume(self, request: pb.NodeStageVolumeRequest, context: Any
                              ) -> pb.NodeStageVolumeResponse:
        await asyncio.to_thread(self.driver.node_stage, request.volume_id, request.staging_target_path,
                                optional_capability(request))
        return pb.NodeStageVolumeResponse()

    @rpc
    async def NodeUnstageVolume(self, request: pb.NodeUnstageVolumeRequest, context: Any
                                ) -> pb.NodeUnstageVolumeResponse:
        await asyncio.to_thread(self.driver.node_unstage, request.volume_id, request.staging_target_path)
        return pb.NodeUnstageVolumeResponse()

    @rpc
    async def NodePublishVolume(self, request: pb.NodePublishVolumeRequest, context: Any
                                ) -> pb.NodePublishVolumeResponse:
        await asyncio.to_thread(self.driver.node_publish, request.volume_id, request.target_path,
                                optional_capability(request), request.staging_target_path, request.readonly,
                                dict(request.volume_context))
        return pb.NodePublishVolumeResponse()

    @rpc
    async def NodeUnpublishVolume(self, request: pb.NodeUnpublishVolumeRequest, context: Any
                                  ) -> pb.NodeUnpublishVolumeResponse:
        await asyncio.to_thread(self.driver.node_unpublish, request.volume_id, request.target_path)
        return pb.NodeUnpublishVolumeResponse()

    @rpc
    async def NodeGetVolumeStats(self, request: pb.NodeGetVolumeStatsRequest, context: Any
                                 ) -> pb.NodeGetVolumeStatsResponse:
        stats = await asyncio.to_thread(self.driver.node_volume_stats, request.volume_id, request.volume_path)
        return stats_message(stats)

    @rpc
    async def NodeExpandVolume(self, request: pb.NodeExpandVolumeRequest, context: Any
                               ) -> pb.NodeExpandVolumeResponse:
        size = await asyncio.to_thread(self.driver.node_expand, request.volume_id, request.volume_path,
                                       request.capacity_range.required_bytes,
                                       request.capacity_range.limit_bytes)
        return pb.NodeExpandVolumeResponse(capacity_bytes=size)


def prepare_socket(path: str) -> None:
    """The socket's directory made, and a socket left by a previous run removed; any other file there
    is an error (blocking)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise FileExistsError(f"{path} exists and is not a socket")
    os.unlink(path)


async def start(driver: HostPath, socket_path: str) -> grpc.aio.Server:
    """Serve Identity, Controller and Node on unix://socket_path (mode 0600)."""
    await asyncio.to_thread(prepare_socket, socket_path)
    server = grpc.aio.server()
    csi_pb2_grpc.add_IdentityServicer_to_server(Identity(driver), server)
    csi_pb2_grpc.add_ControllerServicer_to_server(Controller(driver), server)
    csi_pb2_grpc.add_NodeServicer_to_server(Node(driver), server)
    server.add_insecure_port(f"unix://{socket_path}")
    await server.start()
    os.chmod(socket_path, 0o600)
    return server

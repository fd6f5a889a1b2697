"""csi-test's pkg/sanity specs against `nodeagent csi` (one test per spec, named after it).

Session: one driver process (`nodeagent csi`, as root: it mounts) on a private socket and state dir, as
csi-sanity runs against a driver's endpoint. Per test: `r`, sanity's `Resources` — the RPC clients plus a
record of what the spec made, undone afterwards in sanity's order (NodeUnpublish, NodeUnstage,
DeleteVolume, DeleteSnapshot), and the config sanity defaults to (TargetPath's parent and StagingPath made
by the test, 10 GiB volumes, SINGLE_NODE_WRITER mount capabilities).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from csi.proto import csi_pb2 as pb
from csi.proto import csi_pb2_grpc as rpc

pytestmark = pytest.mark.root

TEST_VOLUME_SIZE = 10 * 1024 * 1024 * 1024  # sanity's DefaultTestConfig
TEST_VOLUME_EXPAND_SIZE = TEST_VOLUME_SIZE + 1024 * 1024 * 1024
Mode = pb.VolumeCapability.AccessMode


def unique_string(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def capability(mode: Any = Mode.SINGLE_NODE_WRITER) -> pb.VolumeCapability:
    """TestVolumeCapabilityWithAccessType with sanity's default (mount) access type."""
    return pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(), access_mode=Mode(mode=mode))


def make_create_volume_req(name: str, size: int = TEST_VOLUME_SIZE) -> pb.CreateVolumeRequest:
    return pb.CreateVolumeRequest(name=name, volume_capabilities=[capability()],
                                  capacity_range=pb.CapacityRange(required_bytes=size))


def expect_code(call, code: grpc.StatusCode) -> None:
    """ExpectErrorCode: the call fails with exactly this code."""
    with pytest.raises(grpc.RpcError) as e:
        call()
    assert e.value.code() == code, f"{e.value.code()}: {e.value.details()}"


@dataclasses.dataclass
class Driver:
    socket: str
    state_dir: Path
    log: Path


@pytest.fixture(scope="session")
def driver(tmp_path_factory):
    d = tmp_path_factory.mktemp("csi-sanity")
    sock = str(d / "csi.sock")
    log = d / "driver.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "csi", "--endpoint", f"unix://{sock}",
                                 "--state-dir", str(d / "state"), "--plugin-registration-dir", "",
                                 "--node-id", "sanity-node"], stdout=out, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + 30
        while not os.path.exists(sock):
            assert proc.poll() is None and time.monotonic() < end, log.read_text()
            time.sleep(0.05)
        yield Driver(sock, d / "state", log)
    finally:
        proc.terminate()
        proc.wait(10)


@dataclasses.dataclass
class Resources:
    """sanity's Resources: clients, the config's paths, and cleanup of what a spec made."""

    conn: grpc.Channel
    target_path: str  # the parent of NodePublish's target path (sanity's TargetPath)
    staging_path: str
    identity: rpc.IdentityStub = dataclasses.field(init=False)
    controller: rpc.ControllerStub = dataclasses.field(init=False)
    node: rpc.NodeStub = dataclasses.field(init=False)
    volumes: list[str] = dataclasses.field(default_factory=list)
    snapshots: list[str] = dataclasses.field(default_factory=list)
    staged: list[str] = dataclasses.field(default_factory=list)  # volume ids
    published: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (volume id, target)

    def __post_init__(self) -> None:
        self.identity = rpc.IdentityStub(self.conn)
        self.controller = rpc.ControllerStub(self.conn)
        self.node = rpc.NodeStub(self.conn)

    def must_create_volume(self, req: pb.CreateVolumeRequest) -> pb.CreateVolumeResponse:
        vol = self.controller.CreateVolume(req)
        assert vol.volume.volume_id
        self.volumes.append(vol.volume.volume_id)
        return vol

    def must_create_snapshot(self, req: pb.CreateSnapshotRequest) -> pb.CreateSnapshotResponse:
        snap = self.controller.CreateSnapshot(req)
        assert snap.snapshot.snapshot_id
        self.snapshots.append(snap.snapshot.snapshot_id)
        return snap

    def stage(self, volume_id: str, cap: pb.VolumeCapability | None = None) -> None:
        self.node.NodeStageVolume(pb.NodeStageVolumeRequest(
            volume_id=volume_id, staging_target_path=self.staging_path,
            volume_capability=cap or capability()))
        self.staged.append(volume_id)

    def publish(self, volume_id: str, target: str = "target", cap: pb.VolumeCapability | None = None
                ) -> str:
        path = f"{self.target_path}/{target}"
        self.node.NodePublishVolume(pb.NodePublishVolumeRequest(
            volume_id=volume_id, target_path=path, staging_target_path=self.staging_path,
            volume_capability=cap or capability()))
        self.published.append((volume_id, path))
        return path

    def cleanup(self) -> None:
        for vid, path in self.published:
            if os.path.lexists(path):
                self.node.NodeUnpublishVolume(
                    pb.NodeUnpublishVolumeRequest(volume_id=vid, target_path=path))
        for vid in dict.fromkeys(self.staged):
            self.node.NodeUnstageVolume(pb.NodeUnstageVolumeRequest(volume_id=vid,
                                                                    staging_target_path=self.staging_path))
        for vid in self.volumes:
            self.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vid))
        for sid in self.snapshots:
            self.controller.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot_id=sid))


@pytest.fixture
def r(driver, tmp_path):
    target, staging = tmp_path / "csi-mount", tmp_path / "csi-staging"
    target.mkdir()
    staging.mkdir()
    with grpc.insecure_channel(f"unix://{driver.socket}") as ch:
        res = Resources(ch, str(target), str(staging))
        try:
            yield res
        finally:
            res.cleanup()
    left = [m for m in Path("/proc/self/mountinfo").read_text().splitlines() if str(tmp_path) in m]
    assert not left, f"mounts left behind: {left}"

"""`nodeagent csi` keeps what it acknowledged: records written before an RPC answers survive kill -9, a
restarted driver serves them, and records of mounts that are gone (a node reset) are dropped at start."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from csi.proto import csi_pb2 as pb
from csi.proto import csi_pb2_grpc as rpc
from kernel.mounts import is_mountpoint, unmount

pytestmark = pytest.mark.root

CAP = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(),
                          access_mode=pb.VolumeCapability.AccessMode(mode="SINGLE_NODE_WRITER"))


def start(d: Path) -> subprocess.Popen:
    sock = d / "csi.sock"
    with contextlib.suppress(FileNotFoundError):
        sock.unlink()
    p = subprocess.Popen([sys.executable, "-m", "nodeagent", "csi", "--endpoint", str(sock), "--state-dir",
                          str(d / "state"), "--plugin-registration-dir", "", "--node-id", "n1"],
                         stdout=subprocess.DEVNULL, stderr=open(d / "driver.log", "ab"))
    end = time.monotonic() + 30
    while not sock.exists():
        assert p.poll() is None and time.monotonic() < end, (d / "driver.log").read_text()
        time.sleep(0.05)
    return p


def test_acknowledged_volumes_and_publications_survive_kill_9(tmp_path):
    p = start(tmp_path)
    staging, target = tmp_path / "staging", tmp_path / "pods" / "target"
    staging.mkdir()
    target.parent.mkdir()
    try:
        with grpc.insecure_channel(f"unix://{tmp_path}/csi.sock") as ch:
            c, n = rpc.ControllerStub(ch), rpc.NodeStub(ch)
            vol = c.CreateVolume(pb.CreateVolumeRequest(name="kept", volume_capabilities=[CAP])).volume
            n.NodeStageVolume(pb.NodeStageVolumeRequest(
                volume_id=vol.volume_id, staging_target_path=str(staging), volume_capability=CAP))
            n.NodePublishVolume(pb.NodePublishVolumeRequest(volume_id=vol.volume_id, target_path=str(target),
                                                            staging_target_path=str(staging),
                                                            volume_capability=CAP))
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        assert is_mountpoint(str(target)) and is_mountpoint(str(staging))
        p = start(tmp_path)
        with grpc.insecure_channel(f"unix://{tmp_path}/csi.sock") as ch:
            c, n = rpc.ControllerStub(ch), rpc.NodeStub(ch)
            listed = c.ListVolumes(pb.ListVolumesRequest()).entries
            assert [e.volume.volume_id for e in listed] == [vol.volume_id]
            again = c.CreateVolume(pb.CreateVolumeRequest(name="kept", volume_capabilities=[CAP])).volume
            assert again.volume_id == vol.volume_id
            # still published: DeleteVolume waits for the node, the stats are there
            with pytest.raises(grpc.RpcError) as e:
                c.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol.volume_id))
            assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert n.NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(volume_id=vol.volume_id,
                                                                     volume_path=str(target))).usage
        # a node reset takes the mounts away behind the driver's back
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        unmount(str(target))
        unmount(str(staging))
        p = start(tmp_path)
        with grpc.insecure_channel(f"unix://{tmp_path}/csi.sock") as ch:
            rpc.ControllerStub(ch).DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol.volume_id))
        assert not (tmp_path / "state" / "volumes" / vol.volume_id).exists()
    finally:
        for m in (target, staging):
            if is_mountpoint(str(m)):
                unmount(str(m))
        p.terminate()
        p.wait(10)

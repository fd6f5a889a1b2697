"""sanity node.go: "Node Service" (this driver has STAGE_UNSTAGE_VOLUME, GET_VOLUME_STATS, EXPAND_VOLUME
and SINGLE_NODE_MULTI_WRITER; no ControllerPublish)."""

import os

import grpc

from csi.proto import csi_pb2 as pb
from kernel.mounts import is_mountpoint
from tests.conformance.csi.conftest import (
    TEST_VOLUME_EXPAND_SIZE,
    Mode,
    capability,
    expect_code,
    make_create_volume_req,
    unique_string,
)

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
NodeRPC = pb.NodeServiceCapability.RPC


def create_volume(r, name: str, cap: pb.VolumeCapability | None = None) -> pb.CreateVolumeResponse:
    req = make_create_volume_req(name)
    del req.volume_capabilities[:]
    req.volume_capabilities.append(cap or capability())
    return r.must_create_volume(req)


def test_nodegetcapabilities_should_return_appropriate_capabilities(r):
    caps = r.node.NodeGetCapabilities(pb.NodeGetCapabilitiesRequest())
    known = {NodeRPC.UNKNOWN, NodeRPC.STAGE_UNSTAGE_VOLUME, NodeRPC.GET_VOLUME_STATS, NodeRPC.EXPAND_VOLUME,
             NodeRPC.VOLUME_CONDITION, NodeRPC.SINGLE_NODE_MULTI_WRITER, NodeRPC.VOLUME_MOUNT_GROUP}
    for c in caps.capabilities:
        assert c.rpc.type in known, c
    assert {c.rpc.type for c in caps.capabilities} == {
        NodeRPC.STAGE_UNSTAGE_VOLUME, NodeRPC.GET_VOLUME_STATS, NodeRPC.EXPAND_VOLUME,
        NodeRPC.SINGLE_NODE_MULTI_WRITER}


def test_nodegetinfo_should_return_appropriate_values(r):
    info = r.node.NodeGetInfo(pb.NodeGetInfoRequest())
    assert info.node_id == "sanity-node"
    assert info.max_volumes_per_node >= 0
    assert info.HasField("accessible_topology")  # VOLUME_ACCESSIBILITY_CONSTRAINTS is advertised
    assert dict(info.accessible_topology.segments) == {"topology.hostpath.csi/node": "sanity-node"}


def test_nodepublishvolume_should_fail_when_no_volume_id_is_provided(r):
    expect_code(lambda: r.node.NodePublishVolume(pb.NodePublishVolumeRequest()), INVALID)


def test_nodepublishvolume_should_fail_when_no_target_path_is_provided(r):
    expect_code(lambda: r.node.NodePublishVolume(pb.NodePublishVolumeRequest(volume_id="id")), INVALID)


def test_nodepublishvolume_should_fail_when_no_volume_capability_is_provided(r):
    req = pb.NodePublishVolumeRequest(volume_id="id", target_path=f"{r.target_path}/target")
    expect_code(lambda: r.node.NodePublishVolume(req), INVALID)


def test_nodepublishvolume_with_single_node_multi_writer_capability_should_fail_when_volume_with_single_node_single_writer_access_mode_is_already_mounted_at_a_different_target_path(r):  # noqa: E501
    cap = capability(Mode.SINGLE_NODE_SINGLE_WRITER)
    vol = create_volume(r, unique_string("sanity-node-publish-single-node-single-writer"), cap)
    vid = vol.volume.volume_id
    r.stage(vid, cap)
    r.publish(vid, "target", cap)
    req = pb.NodePublishVolumeRequest(volume_id=vid, target_path=f"{r.target_path}/other_target",
                                      volume_capability=cap, staging_target_path=r.staging_path)
    expect_code(lambda: r.node.NodePublishVolume(req), grpc.StatusCode.FAILED_PRECONDITION)
    assert not os.path.exists(f"{r.target_path}/other_target")


def test_nodeunpublishvolume_should_fail_when_no_volume_id_is_provided(r):
    expect_code(lambda: r.node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest()), INVALID)


def test_nodeunpublishvolume_should_fail_when_no_target_path_is_provided(r):
    expect_code(lambda: r.node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(volume_id="id")), INVALID)


def test_nodeunpublishvolume_should_remove_target_path(r):
    vol = create_volume(r, unique_string("sanity-node-unpublish-volume"))
    vid = vol.volume.volume_id
    r.stage(vid)
    path = r.publish(vid)
    assert os.path.isdir(path) and is_mountpoint(path)
    r.node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(volume_id=vid, target_path=path))
    assert not os.path.lexists(path)


def test_nodestagevolume_should_fail_when_no_volume_id_is_provided(r):
    req = pb.NodeStageVolumeRequest(staging_target_path=r.staging_path, volume_capability=capability(),
                                    publish_context={"device": "/dev/mock"})
    expect_code(lambda: r.node.NodeStageVolume(req), INVALID)


def test_nodestagevolume_should_fail_when_no_staging_target_path_is_provided(r):
    req = pb.NodeStageVolumeRequest(volume_id="id", volume_capability=capability(),
                                    publish_context={"device": "/dev/mock"})
    expect_code(lambda: r.node.NodeStageVolume(req), INVALID)


def test_nodestagevolume_should_fail_when_no_volume_capability_is_provided(r):
    vol = r.must_create_volume(make_create_volume_req(unique_string("sanity-node-stage-nocaps")))
    req = pb.NodeStageVolumeRequest(volume_id=vol.volume.volume_id, staging_target_path=r.staging_path,
                                    publish_context={"device": "/dev/mock"})
    expect_code(lambda: r.node.NodeStageVolume(req), INVALID)


def test_nodeunstagevolume_should_fail_when_no_volume_id_is_provided(r):
    req = pb.NodeUnstageVolumeRequest(staging_target_path=r.staging_path)
    expect_code(lambda: r.node.NodeUnstageVolume(req), INVALID)


def test_nodeunstagevolume_should_fail_when_no_staging_target_path_is_provided(r):
    expect_code(lambda: r.node.NodeUnstageVolume(pb.NodeUnstageVolumeRequest(volume_id="id")), INVALID)


def test_nodegetvolumestats_should_fail_when_no_volume_id_is_provided(r):
    expect_code(lambda: r.node.NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(volume_path="some/path")),
                INVALID)


def test_nodegetvolumestats_should_fail_when_no_volume_path_is_provided(r):
    expect_code(lambda: r.node.NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(volume_id="id")), INVALID)


def test_nodegetvolumestats_should_fail_when_volume_is_not_found(r):
    req = pb.NodeGetVolumeStatsRequest(volume_id="id-does-not-exist", volume_path="some/path")
    expect_code(lambda: r.node.NodeGetVolumeStats(req), NOT_FOUND)


def test_nodegetvolumestats_should_fail_when_volume_does_not_exist_on_the_specified_path(r):
    vol = create_volume(r, unique_string("sanity-node-get-volume-stats"))
    r.stage(vol.volume.volume_id)
    r.publish(vol.volume.volume_id)
    req = pb.NodeGetVolumeStatsRequest(volume_id=vol.volume.volume_id, volume_path="some/path")
    expect_code(lambda: r.node.NodeGetVolumeStats(req), NOT_FOUND)


def test_nodeexpandvolume_should_fail_when_no_volume_id_is_provided(r):
    req = pb.NodeExpandVolumeRequest(volume_path=r.target_path, volume_capability=capability())
    expect_code(lambda: r.node.NodeExpandVolume(req), INVALID)


def test_nodeexpandvolume_should_fail_when_no_volume_path_is_provided(r):
    vol = create_volume(r, unique_string("sanity-node-expand-volume-valid-id"))
    req = pb.NodeExpandVolumeRequest(volume_id=vol.volume.volume_id, volume_capability=capability())
    expect_code(lambda: r.node.NodeExpandVolume(req), INVALID)


def test_nodeexpandvolume_should_fail_when_volume_is_not_found(r):
    req = pb.NodeExpandVolumeRequest(volume_id="id-does-not-exist", volume_path="some/path")
    expect_code(lambda: r.node.NodeExpandVolume(req), NOT_FOUND)


def test_nodeexpandvolume_should_work_if_node_expand_is_called_after_node_publish(r):
    vol = create_volume(r, unique_string("sanity-node-expand-volume"))
    vid = vol.volume.volume_id
    res = r.controller.ControllerExpandVolume(pb.ControllerExpandVolumeRequest(
        volume_id=vid, capacity_range=pb.CapacityRange(required_bytes=TEST_VOLUME_EXPAND_SIZE)))
    assert res.capacity_bytes == TEST_VOLUME_EXPAND_SIZE
    r.stage(vid)
    path = r.publish(vid)
    r.node.NodeExpandVolume(pb.NodeExpandVolumeRequest(
        volume_id=vid, volume_path=path,
        capacity_range=pb.CapacityRange(required_bytes=TEST_VOLUME_EXPAND_SIZE)))


def run_controller_test(r, count: int) -> None:
    """sanity's runControllerTest: create in the node's topology, stage and publish `count` times, stats."""
    info = r.node.NodeGetInfo(pb.NodeGetInfoRequest())
    req = make_create_volume_req(unique_string(f"sanity-node-full-{count}"))
    req.accessibility_requirements.requisite.append(info.accessible_topology)
    vol = r.must_create_volume(req)
    vid = vol.volume.volume_id
    for _ in range(count):
        r.stage(vid)
    for _ in range(count):
        path = r.publish(vid)
    stats = r.node.NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(volume_id=vid, volume_path=path))
    assert stats.usage
    for _ in range(count):
        r.node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(volume_id=vid, target_path=path))
    assert not os.path.lexists(path)
    for _ in range(count):
        r.node.NodeUnstageVolume(pb.NodeUnstageVolumeRequest(volume_id=vid,
                                                             staging_target_path=r.staging_path))
    assert not is_mountpoint(r.staging_path)


def test_node_service_should_work(r):
    run_controller_test(r, 1)


def test_node_service_should_be_idempotent(r):
    run_controller_test(r, 10)  # sanity's --csi.testvolumeaccesstype default IdempotentCount is 10

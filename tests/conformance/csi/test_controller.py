"""sanity controller.go: "Controller Service [Controller Server]" (the specs for the capabilities this
driver advertises; ControllerPublish/Unpublish and ModifyVolume are not among them)."""

import grpc

from csi.proto import csi_pb2 as pb
from tests.conformance.csi.conftest import (
    TEST_VOLUME_EXPAND_SIZE,
    TEST_VOLUME_SIZE,
    capability,
    expect_code,
    make_create_volume_req,
    unique_string,
)

RPC = pb.ControllerServiceCapability.RPC
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def test_controllergetcapabilities_should_return_appropriate_capabilities(r):
    caps = r.controller.ControllerGetCapabilities(pb.ControllerGetCapabilitiesRequest())
    known = set(RPC.Type.values())
    for c in caps.capabilities:
        assert c.rpc.type in known
    assert {c.rpc.type for c in caps.capabilities} >= {
        RPC.CREATE_DELETE_VOLUME, RPC.CREATE_DELETE_SNAPSHOT, RPC.LIST_SNAPSHOTS, RPC.LIST_VOLUMES,
        RPC.GET_CAPACITY, RPC.CLONE_VOLUME, RPC.EXPAND_VOLUME}
    assert RPC.PUBLISH_UNPUBLISH_VOLUME not in {c.rpc.type for c in caps.capabilities}


def test_getcapacity_should_return_capacity_no_optional_values_added(r):
    res = r.controller.GetCapacity(pb.GetCapacityRequest())
    assert res.available_capacity > 0


def test_listvolumes_should_return_appropriate_values_no_optional_values_added(r):
    vols = r.controller.ListVolumes(pb.ListVolumesRequest())
    for e in vols.entries:
        assert e.volume.volume_id


def test_listvolumes_should_fail_when_an_invalid_starting_token_is_passed(r):
    expect_code(lambda: r.controller.ListVolumes(pb.ListVolumesRequest(starting_token="invalid-token")),
                grpc.StatusCode.ABORTED)


def test_listvolumes_check_the_presence_of_new_volumes_and_absence_of_deleted_ones_in_the_volume_list(r):
    total = len(r.controller.ListVolumes(pb.ListVolumesRequest()).entries)
    vol = r.controller.CreateVolume(make_create_volume_req(unique_string("new-addition")))
    assert len(r.controller.ListVolumes(pb.ListVolumesRequest()).entries) == total + 1
    r.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol.volume.volume_id))
    assert len(r.controller.ListVolumes(pb.ListVolumesRequest()).entries) == total


def test_listvolumes_pagination(r):
    """The XIt "pagination should detect volumes added between pages…": tokens page through every volume,
    and a token still works after the last volume of its page is deleted."""
    ids = [r.must_create_volume(make_create_volume_req(unique_string("page"))).volume.volume_id
           for _ in range(4)]
    first = r.controller.ListVolumes(pb.ListVolumesRequest(max_entries=2))
    assert len(first.entries) == 2 and first.next_token
    r.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=first.entries[-1].volume.volume_id))
    rest = r.controller.ListVolumes(pb.ListVolumesRequest(starting_token=first.next_token))
    seen = {e.volume.volume_id for e in [*first.entries, *rest.entries]}
    assert set(ids) - {first.entries[-1].volume.volume_id} <= seen | {first.entries[-1].volume.volume_id}


def test_createvolume_should_fail_when_no_name_is_provided(r):
    req = make_create_volume_req("")
    expect_code(lambda: r.controller.CreateVolume(req), INVALID)


def test_createvolume_should_fail_when_no_volume_capabilities_are_provided(r):
    req = pb.CreateVolumeRequest(name=unique_string("sanity-controller-create-no-volume-capabilities"))
    expect_code(lambda: r.controller.CreateVolume(req), INVALID)


def test_createvolume_should_return_appropriate_values_singlenodewriter_nocapacity(r):
    req = pb.CreateVolumeRequest(name=unique_string("sanity-controller-create-single-no-capacity"),
                                 volume_capabilities=[capability()])
    vol = r.must_create_volume(req)
    assert vol.volume.volume_id


def test_createvolume_should_return_appropriate_values_singlenodewriter_withcapacity_1gi(r):
    name = unique_string("sanity-controller-create-single-with-capacity")
    vol = r.must_create_volume(make_create_volume_req(name))
    assert vol.volume.capacity_bytes == 0 or vol.volume.capacity_bytes >= TEST_VOLUME_SIZE


def test_createvolume_should_not_fail_when_requesting_to_create_a_volume_with_already_existing_name_and_same_capacity(r):  # noqa: E501
    name = unique_string("sanity-controller-create-twice")
    v1 = r.must_create_volume(make_create_volume_req(name))
    v2 = r.must_create_volume(make_create_volume_req(name))
    assert v1.volume.volume_id == v2.volume.volume_id
    assert v2.volume.capacity_bytes >= TEST_VOLUME_SIZE


def test_createvolume_should_fail_when_requesting_to_create_a_volume_with_already_existing_name_and_different_capacity(r):  # noqa: E501
    name = unique_string("sanity-controller-create-twice-different")
    v1 = r.must_create_volume(pb.CreateVolumeRequest(
        name=name, volume_capabilities=[capability()],
        capacity_range=pb.CapacityRange(required_bytes=TEST_VOLUME_SIZE, limit_bytes=TEST_VOLUME_SIZE)))
    assert v1.volume.capacity_bytes == TEST_VOLUME_SIZE
    size2 = 2 * TEST_VOLUME_SIZE
    req = pb.CreateVolumeRequest(name=name, volume_capabilities=[capability()],
                                 capacity_range=pb.CapacityRange(required_bytes=size2, limit_bytes=size2))
    expect_code(lambda: r.controller.CreateVolume(req), grpc.StatusCode.ALREADY_EXISTS)


def test_createvolume_should_not_fail_when_creating_volume_with_maximum_length_name(r):
    name = "a" * 128
    vol = r.must_create_volume(make_create_volume_req(name))
    assert vol.volume.capacity_bytes >= TEST_VOLUME_SIZE


def test_createvolume_should_create_volume_from_an_existing_source_snapshot(r):
    vol = r.must_create_volume(make_create_volume_req(unique_string("sanity-controller-source-vol")))
    snap = r.must_create_snapshot(pb.CreateSnapshotRequest(
        name=unique_string("sanity-controller-snap-from-vol"), source_volume_id=vol.volume.volume_id))
    req = make_create_volume_req(unique_string("sanity-controller-vol-from-snap"))
    req.volume_content_source.snapshot.snapshot_id = snap.snapshot.snapshot_id
    new = r.must_create_volume(req)
    assert new.volume.HasField("content_source")
    assert new.volume.content_source.snapshot.snapshot_id == snap.snapshot.snapshot_id


def test_createvolume_should_fail_when_the_volume_source_snapshot_is_not_found(r):
    req = make_create_volume_req(unique_string("sanity-controller-snap-not-found"))
    req.volume_content_source.snapshot.snapshot_id = "non-existing"
    expect_code(lambda: r.controller.CreateVolume(req), grpc.StatusCode.NOT_FOUND)


def test_createvolume_should_create_volume_from_an_existing_source_volume(r):
    src = r.must_create_volume(make_create_volume_req(unique_string("sanity-controller-source-vol")))
    req = make_create_volume_req(unique_string("sanity-controller-vol-from-vol"))
    req.volume_content_source.volume.volume_id = src.volume.volume_id
    new = r.must_create_volume(req)
    assert new.volume.content_source.volume.volume_id == src.volume.volume_id


def test_createvolume_should_fail_when_the_volume_source_volume_is_not_found(r):
    req = make_create_volume_req(unique_string("sanity-controller-vol-not-found"))
    req.volume_content_source.volume.volume_id = "non-existing"
    expect_code(lambda: r.controller.CreateVolume(req), grpc.StatusCode.NOT_FOUND)


def test_deletevolume_should_fail_when_no_volume_id_is_provided(r):
    expect_code(lambda: r.controller.DeleteVolume(pb.DeleteVolumeRequest()), INVALID)


def test_deletevolume_should_succeed_when_an_invalid_volume_id_is_used(r):
    r.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id="reallyfakevolumeid"))


def test_deletevolume_should_return_appropriate_values_no_optional_values_added(r):
    vol = r.controller.CreateVolume(make_create_volume_req(unique_string("sanity-controller-delete")))
    r.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol.volume.volume_id))


def test_validatevolumecapabilities_should_fail_when_no_volume_id_is_provided(r):
    req = pb.ValidateVolumeCapabilitiesRequest(volume_capabilities=[capability()])
    expect_code(lambda: r.controller.ValidateVolumeCapabilities(req), INVALID)


def test_validatevolumecapabilities_should_fail_when_no_volume_capabilities_are_provided(r):
    vol = r.must_create_volume(make_create_volume_req(unique_string("sanity-controller-validate-nocaps")))
    req = pb.ValidateVolumeCapabilitiesRequest(volume_id=vol.volume.volume_id)
    expect_code(lambda: r.controller.ValidateVolumeCapabilities(req), INVALID)


def test_validatevolumecapabilities_should_return_appropriate_values_no_optional_values_added(r):
    vol = r.must_create_volume(make_create_volume_req(unique_string("sanity-controller-validate")))
    res = r.controller.ValidateVolumeCapabilities(pb.ValidateVolumeCapabilitiesRequest(
        volume_id=vol.volume.volume_id, volume_capabilities=[capability()]))
    assert res.HasField("confirmed") and res.confirmed.volume_capabilities


def test_validatevolumecapabilities_should_fail_when_the_requested_volume_does_not_exist(r):
    req = pb.ValidateVolumeCapabilitiesRequest(volume_id="some-vol-id", volume_capabilities=[capability()])
    expect_code(lambda: r.controller.ValidateVolumeCapabilities(req), grpc.StatusCode.NOT_FOUND)


def test_expandvolume_should_fail_if_no_volume_id_is_given(r):
    req = pb.ControllerExpandVolumeRequest(capacity_range=pb.CapacityRange(required_bytes=TEST_VOLUME_SIZE))
    expect_code(lambda: r.controller.ControllerExpandVolume(req), INVALID)


def test_expandvolume_should_fail_if_no_capacity_range_is_given(r):
    vol = r.must_create_volume(make_create_volume_req(unique_string("sanity-expand")))
    req = pb.ControllerExpandVolumeRequest(volume_id=vol.volume.volume_id)
    expect_code(lambda: r.controller.ControllerExpandVolume(req), INVALID)


def test_expandvolume_should_work(r):
    vol = r.must_create_volume(make_create_volume_req(unique_string("sanity-expand")))
    res = r.controller.ControllerExpandVolume(pb.ControllerExpandVolumeRequest(
        volume_id=vol.volume.volume_id,
        capacity_range=pb.CapacityRange(required_bytes=TEST_VOLUME_EXPAND_SIZE),
        volume_capability=capability()))
    assert res.capacity_bytes >= TEST_VOLUME_EXPAND_SIZE

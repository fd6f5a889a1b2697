"""sanity controller.go: "ListSnapshots", "DeleteSnapshot" and "CreateSnapshot [Controller Server]"."""

import grpc

from csi.proto import csi_pb2 as pb
from tests.conformance.csi.conftest import expect_code, make_create_volume_req, unique_string

INVALID = grpc.StatusCode.INVALID_ARGUMENT


def verify_snapshot_info(s: pb.Snapshot) -> None:
    assert s.snapshot_id and s.source_volume_id and s.HasField("creation_time")


def volume_and_snapshot(r, prefix: str) -> tuple[pb.CreateVolumeResponse, pb.CreateSnapshotResponse]:
    vol = r.must_create_volume(make_create_volume_req(unique_string(f"{prefix}-volume")))
    snap = r.must_create_snapshot(pb.CreateSnapshotRequest(name=unique_string(f"{prefix}-snapshot"),
                                                           source_volume_id=vol.volume.volume_id))
    return vol, snap


def test_listsnapshots_should_return_appropriate_values_no_optional_values_added(r):
    volume_and_snapshot(r, "listSnapshots")
    snaps = r.controller.ListSnapshots(pb.ListSnapshotsRequest())
    assert snaps.entries
    for e in snaps.entries:
        verify_snapshot_info(e.snapshot)


def test_listsnapshots_should_return_snapshots_that_match_the_specified_snapshot_id(r):
    volume_and_snapshot(r, "listSnapshots-1")
    _, target = volume_and_snapshot(r, "listSnapshots-2")
    snaps = r.controller.ListSnapshots(pb.ListSnapshotsRequest(snapshot_id=target.snapshot.snapshot_id))
    assert len(snaps.entries) == 1
    verify_snapshot_info(snaps.entries[0].snapshot)
    assert snaps.entries[0].snapshot.snapshot_id == target.snapshot.snapshot_id


def test_listsnapshots_should_return_empty_when_the_specified_snapshot_id_does_not_exist(r):
    snaps = r.controller.ListSnapshots(pb.ListSnapshotsRequest(snapshot_id="none-exist-id"))
    assert not snaps.entries


def test_listsnapshots_should_return_snapshots_that_match_the_specified_source_volume_id(r):
    volume_and_snapshot(r, "listSnapshots-src-1")
    _, target = volume_and_snapshot(r, "listSnapshots-src-2")
    source = target.snapshot.source_volume_id
    snaps = r.controller.ListSnapshots(pb.ListSnapshotsRequest(source_volume_id=source))
    for e in snaps.entries:
        assert e.snapshot.source_volume_id == target.snapshot.source_volume_id
    assert len(snaps.entries) == 1


def test_listsnapshots_should_return_empty_when_the_specified_source_volume_id_does_not_exist(r):
    snaps = r.controller.ListSnapshots(pb.ListSnapshotsRequest(source_volume_id="none-exist-volume-id"))
    assert not snaps.entries


def test_listsnapshots_check_the_presence_of_new_snapshots_in_the_snapshot_list(r):
    total = len(r.controller.ListSnapshots(pb.ListSnapshotsRequest()).entries)
    vol = r.must_create_volume(make_create_volume_req(unique_string("listSnapshots-volume-3")))
    snap = r.controller.CreateSnapshot(pb.CreateSnapshotRequest(
        name=unique_string("listSnapshots-snapshot-3"), source_volume_id=vol.volume.volume_id))
    verify_snapshot_info(snap.snapshot)
    assert len(r.controller.ListSnapshots(pb.ListSnapshotsRequest()).entries) == total + 1
    r.controller.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot_id=snap.snapshot.snapshot_id))
    assert len(r.controller.ListSnapshots(pb.ListSnapshotsRequest()).entries) == total


def test_listsnapshots_should_return_next_token_when_a_limited_number_of_entries_are_requested(r):
    initial = len(r.controller.ListSnapshots(pb.ListSnapshotsRequest()).entries)
    minimum, max_entries = 5, 5
    for i in range(max(0, minimum - initial)):
        volume_and_snapshot(r, f"volume{i}")
    total = len(r.controller.ListSnapshots(pb.ListSnapshotsRequest()).entries)
    assert total >= minimum
    first = r.controller.ListSnapshots(pb.ListSnapshotsRequest(max_entries=max_entries))
    assert len(first.entries) == max_entries
    expected_token = total > max_entries
    assert bool(first.next_token) == expected_token
    if first.next_token:
        rest = r.controller.ListSnapshots(pb.ListSnapshotsRequest(starting_token=first.next_token))
        assert len(rest.entries) == total - max_entries
        ids = {e.snapshot.snapshot_id for e in [*first.entries, *rest.entries]}
        assert len(ids) == total


def test_deletesnapshot_should_fail_when_no_snapshot_id_is_provided(r):
    expect_code(lambda: r.controller.DeleteSnapshot(pb.DeleteSnapshotRequest()), INVALID)


def test_deletesnapshot_should_succeed_when_an_invalid_snapshot_id_is_used(r):
    r.controller.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot_id="reallyfakesnapshotid"))


def test_deletesnapshot_should_return_appropriate_values_no_optional_values_added(r):
    volume_and_snapshot(r, "DeleteSnapshot")


def test_createsnapshot_should_fail_when_no_name_is_provided(r):
    req = pb.CreateSnapshotRequest(source_volume_id="testId")
    expect_code(lambda: r.controller.CreateSnapshot(req), INVALID)


def test_createsnapshot_should_fail_when_no_source_volume_id_is_provided(r):
    req = pb.CreateSnapshotRequest(name=unique_string("CreateSnapshot-snapshot-2"))
    expect_code(lambda: r.controller.CreateSnapshot(req), INVALID)


def test_createsnapshot_should_succeed_when_requesting_to_create_a_snapshot_with_already_existing_name_and_same_source_volume_id(r):  # noqa: E501
    vol = r.must_create_volume(make_create_volume_req(unique_string("CreateSnapshot-volume-1")))
    req = pb.CreateSnapshotRequest(name=unique_string("CreateSnapshot-snapshot-1"),
                                   source_volume_id=vol.volume.volume_id)
    s1 = r.must_create_snapshot(req)
    s2 = r.must_create_snapshot(req)
    verify_snapshot_info(s2.snapshot)
    assert s1.snapshot.snapshot_id == s2.snapshot.snapshot_id


def test_createsnapshot_should_fail_when_requesting_to_create_a_snapshot_with_already_existing_name_and_different_source_volume_id(r):  # noqa: E501
    name = unique_string("CreateSnapshot-snapshot-2")
    vol1 = r.must_create_volume(make_create_volume_req(unique_string("CreateSnapshot-volume-2")))
    r.must_create_snapshot(pb.CreateSnapshotRequest(name=name, source_volume_id=vol1.volume.volume_id))
    vol2 = r.must_create_volume(make_create_volume_req(unique_string("CreateSnapshot-volume-3")))
    req = pb.CreateSnapshotRequest(name=name, source_volume_id=vol2.volume.volume_id)
    expect_code(lambda: r.controller.CreateSnapshot(req), grpc.StatusCode.ALREADY_EXISTS)


def test_createsnapshot_should_succeed_when_creating_snapshot_with_maximum_length_name(r):
    vol = r.must_create_volume(make_create_volume_req(unique_string("CreateSnapshot-volume-3")))
    snap = r.must_create_snapshot(pb.CreateSnapshotRequest(name="a" * 128,
                                                           source_volume_id=vol.volume.volume_id))
    verify_snapshot_info(snap.snapshot)


def test_snapshot_restores_the_volume_content(r):
    """Beyond sanity (which checks only the response): a file written into a volume is in a volume made
    from its snapshot, and a later change to the source is not."""
    vol = r.must_create_volume(make_create_volume_req(unique_string("restore-src")))
    r.stage(vol.volume.volume_id)
    path = r.publish(vol.volume.volume_id)
    with open(f"{path}/file", "w") as f:
        f.write("before\n")
    snap = r.must_create_snapshot(pb.CreateSnapshotRequest(name=unique_string("restore-snap"),
                                                           source_volume_id=vol.volume.volume_id))
    with open(f"{path}/file", "w") as f:
        f.write("after\n")
    req = make_create_volume_req(unique_string("restore-dst"))
    req.volume_content_source.snapshot.snapshot_id = snap.snapshot.snapshot_id
    new = r.must_create_volume(req)
    r.node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(volume_id=vol.volume.volume_id,
                                                             target_path=path))
    r.node.NodeUnstageVolume(pb.NodeUnstageVolumeRequest(volume_id=vol.volume.volume_id,
                                                         staging_target_path=r.staging_path))
    r.published.remove((vol.volume.volume_id, path))
    r.stage(new.volume.volume_id)
    path = r.publish(new.volume.volume_id)
    with open(f"{path}/file") as f:
        assert f.read() == "before\n"

"""The CSI provisioner's and plugin manager's decisions: CreateVolume from a claim, the PV from a volume,
the node's topology, and the CSINode entry."""

from csi.proto import csi_pb2 as pb
from nodeagent.kubelet.pluginmanager import csinode_driver, with_driver
from nodeagent.kubelet.volumes import csiprovisioner as prov
from nodeagent.kubelet.volumes.csi import Drivers

DRIVER = "hostpath.csi.nodeagent.io"
KEY = "topology.hostpath.csi/node"


def pvc(**ann):
    return {"metadata": {"name": "data", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                         "annotations": {"volume.kubernetes.io/storage-provisioner": DRIVER, **ann}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "csi-hostpath",
                     "resources": {"requests": {"storage": "1Gi"}}}}


SC = {"metadata": {"name": "csi-hostpath"}, "provisioner": DRIVER, "reclaimPolicy": "Delete",
      "parameters": {"csi.storage.k8s.io/fstype": "xfs", "speed": "fast"}, "mountOptions": ["noatime"]}


def test_wants_volume_only_for_registered_drivers_and_this_node():
    d = Drivers()
    assert not prov.wants_volume(pvc(), "n1", d)
    d.add(DRIVER, "/x.sock")
    assert prov.wants_volume(pvc(), "n1", d)
    assert prov.wants_volume(pvc(**{"volume.kubernetes.io/selected-node": "n1"}), "n1", d)
    assert not prov.wants_volume(pvc(**{"volume.kubernetes.io/selected-node": "n2"}), "n1", d)


def test_create_request_from_the_claim_and_class():
    req = prov.create_request(pvc(), SC, [{KEY: "n1"}])
    assert req.name == "pvc-u1" and req.capacity_range.required_bytes == 1 << 30
    assert dict(req.parameters) == {"speed": "fast"}  # csi.storage.k8s.io/ keys: the provisioner's own
    cap = req.volume_capabilities[0]
    assert cap.mount.fs_type == "xfs" and list(cap.mount.mount_flags) == ["noatime"]
    assert cap.access_mode.mode == pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
    assert [dict(t.segments) for t in req.accessibility_requirements.requisite] == [{KEY: "n1"}]
    assert not req.HasField("volume_content_source")
    clone = prov.create_request(pvc(), SC, [], source=("volume", "vol-0"))
    assert clone.volume_content_source.volume.volume_id == "vol-0"
    restore = prov.create_request(pvc(), SC, [], source=("snapshot", "snap-0"))
    assert restore.volume_content_source.snapshot.snapshot_id == "snap-0"


def test_volume_for_a_created_volume():
    vol = pb.Volume(volume_id="vid", capacity_bytes=1 << 30, volume_context={"a": "b"},
                    accessible_topology=[pb.Topology(segments={KEY: "n1"})])
    pv = prov.volume_for(pvc(), SC, DRIVER, vol, "ident")
    assert pv["metadata"]["name"] == "pvc-u1"
    assert pv["metadata"]["annotations"] == {"pv.kubernetes.io/provisioned-by": DRIVER}
    attrs = {"a": "b", "storage.kubernetes.io/csiProvisionerIdentity": "ident"}
    assert pv["spec"]["csi"] == {"driver": DRIVER, "volumeHandle": "vid", "fsType": "xfs",
                                 "volumeAttributes": attrs}
    assert pv["spec"]["capacity"] == {"storage": "1Gi"} and pv["spec"]["mountOptions"] == ["noatime"]
    assert pv["spec"]["claimRef"]["uid"] == "u1"
    assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["n1"]}]}]


def test_requisite_from_the_selected_nodes_csinode_keys():
    node = {"metadata": {"labels": {KEY: "n1", "other": "x"}}}
    csinode = {"spec": {"drivers": [{"name": DRIVER, "nodeID": "n1", "topologyKeys": [KEY]}]}}
    assert prov.requisite_for(node, csinode, DRIVER) == [{KEY: "n1"}]
    assert prov.requisite_for(node, None, DRIVER) == []


def test_delete_is_wanted_for_released_or_deleted_volumes_with_delete_policy():
    pv = {"metadata": {}, "spec": {"persistentVolumeReclaimPolicy": "Delete"}, "status": {"phase": "Bound"}}
    assert not prov.wants_delete(pv)
    assert prov.wants_delete({**pv, "status": {"phase": "Released"}})
    assert prov.wants_delete({**pv, "metadata": {"deletionTimestamp": "now"}})
    assert not prov.wants_delete({**pv, "spec": {"persistentVolumeReclaimPolicy": "Retain"},
                                  "status": {"phase": "Released"}})


def test_csinode_entries():
    entry = csinode_driver(DRIVER, "n1", {KEY: "n1"}, 0)
    assert entry == {"name": DRIVER, "nodeID": "n1", "topologyKeys": [KEY]}
    assert csinode_driver(DRIVER, "n1", {}, 5) == {"name": DRIVER, "nodeID": "n1",
                                                   "allocatable": {"count": 5}}
    node = {"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "z", "nodeID": "n1"}]}}
    added = with_driver(node, entry, DRIVER)
    assert [d["name"] for d in added["spec"]["drivers"]] == [DRIVER, "z"]
    assert [d["name"] for d in with_driver(added, None, DRIVER)["spec"]["drivers"]] == ["z"]


def test_snapshot_class_named_or_the_drivers_default():
    import pytest

    from nodeagent.kubelet.volumes import csisnapshotter as snaps

    default = {"metadata": {"name": "d", "annotations": {snaps.ANN_DEFAULT_CLASS: "true"}},
               "driver": DRIVER, "deletionPolicy": "Retain"}
    other = {"metadata": {"name": "o"}, "driver": "other.example.com"}
    vs = {"metadata": {"name": "s", "namespace": "ns", "uid": "u9"}, "spec": {"source": {}}}
    assert snaps.snapshot_class_for(vs, [default, other], DRIVER) is default
    with pytest.raises(snaps.SnapshotError, match="cannot find a default snapshot class"):
        snaps.snapshot_class_for(vs, [other], DRIVER)
    with pytest.raises(snaps.SnapshotError, match="is for driver other.example.com"):
        snaps.snapshot_class_for({**vs, "spec": {"volumeSnapshotClassName": "o"}}, [default, other], DRIVER)
    content = snaps.content_for(vs, default, "vol-1", DRIVER)
    assert content["metadata"]["name"] == "snapcontent-u9"
    assert content["spec"]["deletionPolicy"] == "Retain"
    assert content["spec"]["source"] == {"volumeHandle": "vol-1"}
    assert content["spec"]["volumeSnapshotRef"]["namespace"] == "ns"


def test_allowed_topologies_become_the_requisite():
    sc = {"allowedTopologies": [{"matchLabelExpressions": [{"key": KEY, "values": ["n1", "n2"]},
                                                           {"key": "zone", "values": ["a"]}]}]}
    assert prov.allowed_topologies(sc) == [{KEY: "n1", "zone": "a"}, {KEY: "n2", "zone": "a"}]
    assert prov.allowed_topologies({}) == []

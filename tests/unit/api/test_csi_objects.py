"""CSIDriver defaults and CSIDriver/CSINode/VolumeAttachment validation, and the kubelet's CSI names."""

import hashlib
from typing import Any

from nodeagent.api import csi
from nodeagent.api.defaults import apply_defaults
from nodeagent.api.validation import validate


def test_csidriver_defaults_as_kube_apiserver():
    d = {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": "x.example.com"}}
    apply_defaults(d, "CSIDriver")
    assert d["spec"] == {"attachRequired": True, "podInfoOnMount": False, "requiresRepublish": False,
                         "storageCapacity": False, "seLinuxMount": False,
                         "fsGroupPolicy": "ReadWriteOnceWithFSType", "volumeLifecycleModes": ["Persistent"]}
    assert csi.validate_csidriver(d) == []
    assert csi.driver_spec(None)["attachRequired"] is True


def test_csidriver_refuses_unknown_modes_and_policies():
    d = {"metadata": {"name": "x"}, "spec": {"volumeLifecycleModes": ["Forever"], "fsGroupPolicy": "Some"}}
    csi.default_csidriver(d)
    fields = {e["field"] for e in csi.validate_csidriver(d)}
    assert fields == {"spec.volumeLifecycleModes[0]", "spec.fsGroupPolicy"}


def test_csinode_validation():
    ok = {"spec": {"drivers": [{"name": "a", "nodeID": "n", "allocatable": {"count": 3},
                               "topologyKeys": ["k"]}]}}
    assert csi.validate_csinode(ok) == []
    bad = {"spec": {"drivers": [{"name": "a", "nodeID": ""}, {"name": "a", "nodeID": "x" * 193,
                                                              "allocatable": {"count": -1}}]}}
    fields = [e["field"] for e in csi.validate_csinode(bad)]
    assert fields == ["spec.drivers[0].nodeID", "spec.drivers[1].name", "spec.drivers[1].nodeID",
                      "spec.drivers[1].allocatable.count"]


def test_volumeattachment_needs_exactly_one_source():
    va: dict[str, Any] = {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                          "metadata": {"name": "va"},
                          "spec": {"attacher": "d", "nodeName": "n", "source": {}}}
    assert [e["field"] for e in validate(va, "VolumeAttachment", False)] == ["spec.source"]
    va["spec"]["source"] = {"persistentVolumeName": "pv"}
    assert validate(va, "VolumeAttachment", False) == []


def test_the_kubelets_names():
    digest = hashlib.sha256(b"vol-1").hexdigest()
    assert csi.staging_path("/var/lib/kubelet", "d.io", "vol-1") == \
        f"/var/lib/kubelet/plugins/kubernetes.io/csi/d.io/{digest}/globalmount"
    assert csi.ephemeral_volume_handle("uid", "scratch") == "csi-" + hashlib.sha256(b"uidscratch").hexdigest()
    assert csi.csi_access_mode(["ReadWriteOnce"], False) == "SINGLE_NODE_WRITER"
    assert csi.csi_access_mode(["ReadWriteOnce"], True) == "SINGLE_NODE_MULTI_WRITER"
    assert csi.csi_access_mode(["ReadWriteOncePod"], True) == "SINGLE_NODE_SINGLE_WRITER"
    assert csi.csi_access_mode(["ReadOnlyMany"], True) == "MULTI_NODE_READER_ONLY"

"""A pod's persistentVolumeClaim volume resolved as the kubelet's desired-state populator does: the reasons a
pod waits in ContainerCreating (FailedMount), and the plugin a bound volume goes through."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.kubelet.volumes import claims
from nodeagent.kubelet.volumes.payloads import VolumeSourceError

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}}
SRC = {"claimName": "data"}


def pvc(phase: str = "Bound", volume: str = "pv1", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "data", "namespace": "ns", "uid": "claim-uid"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"volumeName": volume}, "status": {"phase": phase}}


def pv(uid: str = "claim-uid", **source: Any) -> dict[str, Any]:
    return {"metadata": {"name": "pv1"}, "spec": {"claimRef": {"uid": uid}, **source}}


def reason(claim: Any, volume: Any) -> str:
    with pytest.raises(VolumeSourceError) as e:
        claims.resolve(POD, SRC, claim, volume)
    return str(e.value)


def test_reasons_a_pod_waits():
    assert "persistentvolumeclaims \"data\" not found" in reason(None, None)
    assert "is being deleted" in reason(pvc(deleting=True), pv(hostPath={"path": "/x"}))
    assert reason(pvc(phase="Pending", volume=""), None) == (
        'error processing PVC ns/data: PVC ns/data has non-bound phase ("Pending") or empty '
        'pvc.Spec.VolumeName ("")')
    assert 'persistentvolumes "pv1" not found' in reason(pvc(), None)
    assert "claimRef does not name this claim" in reason(pvc(), pv(uid="other", hostPath={"path": "/x"}))
    assert "volume type nfs is unimplemented" in reason(pvc(), pv(nfs={"server": "s", "path": "/"}))
    assert "has volumeMode Block, which its volume type hostPath does not support" in \
        reason(pvc(), pv(hostPath={"path": "/dev/x"}, volumeMode="Block"))


def test_plugins():
    host = claims.resolve(POD, SRC, pvc(), pv(hostPath={"path": "/srv/a"}))
    assert host == ("hostPath", {"path": "/srv/a"})
    assert claims.resolve(POD, SRC, pvc(), pv(local={"path": "/mnt/d"})) == ("local", {"path": "/mnt/d"})
    block = claims.resolve(POD, SRC, pvc(), pv(local={"path": "/dev/loop9"}, volumeMode="Block"))
    assert block == ("local", {"path": "/dev/loop9"})
    flex = claims.resolve(POD, SRC, pvc(), pv(flexVolume={"driver": "acme/fast"}))
    assert flex == ("flexVolume", {"driver": "acme/fast"})


def test_volume_mode_mismatch_with_the_containers():
    def pod(mounts: list, devices: list) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "c", "volumeMounts": mounts, "volumeDevices": devices}]}}
    as_mount = pod([{"name": "d", "mountPath": "/d"}], [])
    as_device = pod([], [{"name": "d", "devicePath": "/dev/xvda"}])
    assert claims.mode_mismatch(as_mount, "d", "Block") == \
        "volume d has volumeMode Block, but is specified in volumeMounts"
    assert claims.mode_mismatch(as_device, "d", "Filesystem") == \
        "volume d has volumeMode Filesystem, but is specified in volumeDevices"
    assert claims.mode_mismatch(as_device, "d", "Block") is None
    assert claims.mode_mismatch(as_mount, "d", "Filesystem") is None

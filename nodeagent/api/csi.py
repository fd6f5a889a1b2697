"""CSIDriver, CSINode and VolumeAttachment (storage.k8s.io/v1): their well-known names, defaults and
validation, and the small decisions every CSI party shares (the kubelet's paths and volume handles,
access modes in CSI terms).

As kube-apiserver's: a CSIDriver defaults to attachRequired true, podInfoOnMount false, volumeLifecycleModes
[Persistent], fsGroupPolicy ReadWriteOnceWithFSType (pkg/apis/storage/v1/defaults.go).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

Obj = Mapping[str, Any]
FieldErrors = list[dict[str, str]]

LIFECYCLE_MODES = ("Persistent", "Ephemeral")
FS_GROUP_POLICIES = ("ReadWriteOnceWithFSType", "File", "None")
MAX_NODE_ID = 192  # validation.go: csiNodeIDMaxLength
# the volume context keys the kubelet adds when a CSIDriver says podInfoOnMount (csi_mounter.go)
POD_NAME_KEY = "csi.storage.k8s.io/pod.name"
POD_NAMESPACE_KEY = "csi.storage.k8s.io/pod.namespace"
POD_UID_KEY = "csi.storage.k8s.io/pod.uid"
POD_SA_KEY = "csi.storage.k8s.io/serviceAccount.name"
EPHEMERAL_KEY = "csi.storage.k8s.io/ephemeral"
# the Node annotation the kubelet keeps: {driver: nodeID} (nodeinfomanager)
ANN_NODE_IDS = "csi.volume.kubernetes.io/nodeid"
# StorageClass parameters external-provisioner reads itself and does not pass to CreateVolume
PARAM_PREFIX = "csi.storage.k8s.io/"
PARAM_FSTYPE = "csi.storage.k8s.io/fstype"
PROVISIONER_IDENTITY = "storage.kubernetes.io/csiProvisionerIdentity"
PROVISIONER_FINALIZER = "external-provisioner.volume.kubernetes.io/finalizer"

# PersistentVolume access modes → CSI's (csi_client.go asCSIAccessModeV1); with SINGLE_NODE_MULTI_WRITER
# the kubelet sends the finer single-node modes
ACCESS_MODES = {"ReadWriteOnce": "SINGLE_NODE_WRITER", "ReadOnlyMany": "MULTI_NODE_READER_ONLY",
                "ReadWriteMany": "MULTI_NODE_MULTI_WRITER", "ReadWriteOncePod": "SINGLE_NODE_WRITER"}
ACCESS_MODES_MULTI_WRITER = {**ACCESS_MODES, "ReadWriteOnce": "SINGLE_NODE_MULTI_WRITER",
                             "ReadWriteOncePod": "SINGLE_NODE_SINGLE_WRITER"}


def csi_access_mode(modes: list[str] | tuple[str, ...], multi_writer: bool) -> str:
    """The CSI access mode for a volume's access modes (the first one that maps; RWO when none is set)."""
    table = ACCESS_MODES_MULTI_WRITER if multi_writer else ACCESS_MODES
    for m in modes or ("ReadWriteOnce",):
        if m in table:
            return table[m]
    return table["ReadWriteOnce"]


def driver_spec(driver: Obj | None) -> dict[str, Any]:
    """A CSIDriver's spec with the defaults applied; no CSIDriver object behaves as the defaults, as the
    kubelet treats a driver it finds none for (attach required, no pod info, persistent only)."""
    s = dict((driver or {}).get("spec") or {})
    default_driver_spec(s)
    return s


def default_driver_spec(s: dict[str, Any]) -> None:
    s.setdefault("attachRequired", True)
    s.setdefault("podInfoOnMount", False)
    s.setdefault("requiresRepublish", False)
    s.setdefault("storageCapacity", False)
    s.setdefault("seLinuxMount", False)
    s.setdefault("fsGroupPolicy", "ReadWriteOnceWithFSType")
    if not s.get("volumeLifecycleModes"):
        s["volumeLifecycleModes"] = ["Persistent"]


def default_csidriver(obj: dict[str, Any]) -> None:
    default_driver_spec(obj.setdefault("spec", {}))


def staging_path(kubelet_root: str, driver: str, volume_handle: str) -> str:
    """Where the kubelet has a persistent volume staged: plugins/kubernetes.io/csi/<driver>/<sha256 of the
    handle>/globalmount (csi_attacher.go's makeDeviceMountPath)."""
    digest = hashlib.sha256(volume_handle.encode()).hexdigest()
    return f"{kubelet_root}/plugins/kubernetes.io/csi/{driver}/{digest}/globalmount"


def ephemeral_volume_handle(pod_uid: str, volume_name: str) -> str:
    """The volume id the kubelet gives an inline volume: csi-<sha256(pod uid + volume name)>."""
    return "csi-" + hashlib.sha256((pod_uid + volume_name).encode()).hexdigest()


def attachment_name(volume_handle: str, driver: str, node: str) -> str:
    """VolumeAttachment's name: csi-<sha256(handle + driver + node)> (csi_attacher.go's getAttachmentName)."""
    return "csi-" + hashlib.sha256(f"{volume_handle}{driver}{node}".encode()).hexdigest()


# -- validation -------------------------------------------------------------------------------------------


def _e(reason: str, field: str, message: str) -> dict[str, str]:
    return {"reason": reason, "field": field, "message": message}


def _unsupported(field: str, value: Any, allowed: tuple[str, ...]) -> dict[str, str]:
    return _e("FieldValueNotSupported", field,
              f'Unsupported value: "{value}": supported values: ' + ", ".join(f'"{a}"' for a in allowed))


def validate_csidriver(obj: Obj) -> FieldErrors:
    name = (obj.get("metadata") or {}).get("name") or ""
    s = obj.get("spec") or {}
    errs: FieldErrors = []
    if len(name) > 63:
        errs.append(_e("FieldValueTooLong", "metadata.name", "Too long: must have at most 63 bytes"))
    for i, m in enumerate(s.get("volumeLifecycleModes") or []):
        if m not in LIFECYCLE_MODES:
            errs.append(_unsupported(f"spec.volumeLifecycleModes[{i}]", m, LIFECYCLE_MODES))
    if s.get("fsGroupPolicy") not in FS_GROUP_POLICIES:
        errs.append(_unsupported("spec.fsGroupPolicy", s.get("fsGroupPolicy"), FS_GROUP_POLICIES))
    for f in ("attachRequired", "podInfoOnMount", "requiresRepublish", "storageCapacity", "seLinuxMount"):
        if not isinstance(s.get(f), bool):
            errs.append(_e("FieldValueRequired", f"spec.{f}", "Required value"))
    return errs


def validate_csinode(obj: Obj) -> FieldErrors:
    errs: FieldErrors = []
    seen: set[str] = set()
    for i, d in enumerate(((obj.get("spec") or {}).get("drivers")) or []):
        f = f"spec.drivers[{i}]"
        name, node_id = (d or {}).get("name") or "", (d or {}).get("nodeID") or ""
        if not name:
            errs.append(_e("FieldValueRequired", f"{f}.name", "Required value"))
        elif name in seen:
            errs.append(_e("FieldValueDuplicate", f"{f}.name", f'Duplicate value: "{name}"'))
        seen.add(name)
        if not node_id:
            errs.append(_e("FieldValueRequired", f"{f}.nodeID", "Required value"))
        elif len(node_id) > MAX_NODE_ID:
            errs.append(_e("FieldValueInvalid", f"{f}.nodeID",
                           f'Invalid value: "{node_id}": must be {MAX_NODE_ID} characters or less'))
        count = ((d or {}).get("allocatable") or {}).get("count")
        if count is not None and (not isinstance(count, int) or count < 0):
            errs.append(_e("FieldValueInvalid", f"{f}.allocatable.count",
                           f"Invalid value: {count}: must be greater than or equal to 0"))
        keys = (d or {}).get("topologyKeys") or []
        if len(set(keys)) != len(keys):
            errs.append(_e("FieldValueDuplicate", f"{f}.topologyKeys", "Duplicate value"))
    return errs


def validate_volumeattachment(obj: Obj) -> FieldErrors:
    s = obj.get("spec") or {}
    errs: FieldErrors = []
    for f in ("attacher", "nodeName"):
        if not s.get(f):
            errs.append(_e("FieldValueRequired", f"spec.{f}", "Required value"))
    src = s.get("source") or {}
    given = [k for k in ("persistentVolumeName", "inlineVolumeSpec") if src.get(k)]
    if len(given) != 1:
        errs.append(_e("FieldValueRequired" if not given else "FieldValueForbidden", "spec.source",
                       "Required value: must specify exactly one of persistentVolumeName and "
                       "inlineVolumeSpec"))
    return errs

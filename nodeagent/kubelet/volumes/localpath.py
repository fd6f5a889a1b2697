"""The local-path provisioner (k3s's `rancher.io/local-path`), run on every node beside the kubelet.

External-provisioner's node-deployment mode: each node's instance provisions only the claims the
scheduler selected for its node (`volume.kubernetes.io/selected-node`) whose class names this provisioner
(`volume.kubernetes.io/storage-provisioner`), so the directory is made and removed by the node that owns
the disk, never by the control plane reaching into a remote node. As local-path-provisioner does, a
volume is the directory `<root>/pvc-<uid>_<ns>_<claim>`, published as a `hostPath` PV
(`DirectoryOrCreate`) pinned to the node by `nodeAffinity`, pre-bound to its claim and annotated
`pv.kubernetes.io/provisioned-by`; a Released volume with reclaimPolicy Delete has its directory removed,
then the PV object. Expansion (external-resizer's part): a directory has no size to grow, so a bigger
request on a class with `allowVolumeExpansion` is recorded on the PV and the claim at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodeagent.api import storage
from nodeagent.api.quantity import format_quantity
from nodeagent.api.times import now_rfc3339
from nodeagent.client.events import EventRecorder
from nodeagent.client.informer import Informer, key_of
from nodeagent.client.rest import Client, ClientError
from nodeagent.kubelet.volumes.provisionerloop import ProvisionerLoop

PROVISIONER = "rancher.io/local-path"
RESYNC = 15.0

log = logging.getLogger("nodeagent.kubelet.localpath")

Obj = Mapping[str, Any]


# -- decisions --------------------------------------------------------------------------------------------


def volume_name(pvc: Obj) -> str:
    """external-provisioner's naming: pvc-<claim uid>."""
    return f"pvc-{storage.meta(pvc).get('uid')}"


def volume_path(root: str, pvc: Obj) -> str:
    m = storage.meta(pvc)
    return str(Path(root) / f"{volume_name(pvc)}_{m.get('namespace')}_{m.get('name')}")


def wants_volume(pvc: Obj, node_name: str) -> bool:
    """A claim this node's provisioner must serve: ours, selected for this node, not yet bound."""
    ann = storage.annotations_of(pvc)
    prov = ann.get(storage.ANN_STORAGE_PROVISIONER) or ann.get(storage.ANN_BETA_STORAGE_PROVISIONER)
    return (prov == PROVISIONER and ann.get(storage.ANN_SELECTED_NODE) == node_name
            and not storage.spec(pvc).get("volumeName") and not storage.meta(pvc).get("deletionTimestamp"))


def volume_for(pvc: Obj, sc: Obj, node: Obj, root: str) -> dict[str, Any]:
    """The PersistentVolume for a claim on this node (local-path-provisioner's Provision)."""
    m = storage.meta(pvc)
    hostname = (storage.meta(node).get("labels") or {}).get(storage.HOSTNAME_LABEL) or \
        storage.meta(node).get("name")
    request = ((storage.spec(pvc).get("resources") or {}).get("requests") or {}).get("storage")
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": volume_name(pvc), "annotations": {storage.ANN_PROVISIONED_BY: PROVISIONER},
                     "labels": {}},
        "spec": {
            "capacity": {"storage": request},
            "accessModes": list(storage.spec(pvc).get("accessModes") or ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy") or "Delete",
            "storageClassName": storage.meta(sc).get("name"),
            "volumeMode": storage.volume_mode(pvc),
            "mountOptions": list(sc.get("mountOptions") or []),
            "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": m.get("namespace"),
                         "name": m.get("name"), "uid": m.get("uid"),
                         "resourceVersion": m.get("resourceVersion")},
            "hostPath": {"path": volume_path(root, pvc), "type": "DirectoryOrCreate"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": storage.HOSTNAME_LABEL, "operator": "In", "values": [hostname]}]}]}},
        },
    }


def is_ours_here(pv: Obj, root: str) -> bool:
    """A volume this provisioner made on this node (its directory is under our root)."""
    path = ((storage.spec(pv).get("hostPath") or {}).get("path")) or ""
    return storage.annotations_of(pv).get(storage.ANN_PROVISIONED_BY) == PROVISIONER and \
        os.path.dirname(path) == str(Path(root))


def wants_delete(pv: Obj) -> bool:
    return (pv.get("status") or {}).get("phase") == "Released" and \
        storage.spec(pv).get("persistentVolumeReclaimPolicy") == "Delete"


def wants_resize(pvc: Obj, pv: Obj, sc: Obj | None) -> bool:
    return bool(sc and sc.get("allowVolumeExpansion")) and \
        storage.requested_storage(pvc) > storage.capacity(pv) and \
        (pvc.get("status") or {}).get("phase") == "Bound"


# -- the node's disk (blocking: called on a worker thread) -------------------------------------------------


def make_dir(path: str) -> None:
    os.makedirs(path, mode=0o777, exist_ok=True)
    os.chmod(path, 0o777)  # local-path-provisioner's helper does `mkdir -m 0777 -p`


def remove_dir(root: str, path: str) -> None:
    """rm -rf the volume's directory; refuses anything that is not directly under root."""
    if os.path.dirname(os.path.normpath(path)) != os.path.normpath(root):
        raise ValueError(f"{path} is not a local-path volume under {root}")
    if os.path.lexists(path):
        shutil.rmtree(path)


# -- the loop ---------------------------------------------------------------------------------------------


class LocalPathProvisioner(ProvisionerLoop):
    name = "local-path provisioner"
    log = log
    resync = RESYNC

    def __init__(self, client: Client, node_name: str, root: str, recorder: EventRecorder) -> None:
        self.nodes = Informer(client, "nodes", field_selector=f"metadata.name={node_name}")
        super().__init__(client, node_name, recorder, self.nodes)
        self.root = root

    def wants_claim(self, pvc: Obj) -> bool:
        return wants_volume(pvc, self.node_name)

    def wants_delete(self, pv: Obj) -> bool:
        return wants_delete(pv)

    def is_ours(self, pv: Obj) -> bool:
        return is_ours_here(pv, self.root)

    async def provision(self, pvc: Obj) -> None:
        name = volume_name(pvc)
        if self.volumes.get(name) is not None:
            return
        cls = storage.claim_class(pvc)
        sc = self.classes.get(cls)
        node = self.nodes.get(self.node_name)
        if sc is None or node is None:
            self.recorder.record(pvc, "Warning", "ProvisioningFailed",
                                 f'failed to provision volume with StorageClass "{cls}": '
                                 + ("storageclass not found" if sc is None else f"node {self.node_name} not "
                                    "found"))
            return
        self.recorder.record(pvc, "Normal", "Provisioning",
                             f'External provisioner is provisioning volume for claim "{key_of(dict(pvc))}"')
        pv = volume_for(pvc, sc, node, self.root)
        path = pv["spec"]["hostPath"]["path"]
        try:
            await asyncio.to_thread(make_dir, path)
            await self.client.create("persistentvolumes", pv)
        except ClientError as e:
            if e.already_exists:
                return
            await asyncio.to_thread(remove_dir, self.root, path)
            self.recorder.record(pvc, "Warning", "ProvisioningFailed",
                                 f'failed to provision volume with StorageClass "{cls}": {e.message}')
            raise
        except OSError as e:
            self.recorder.record(pvc, "Warning", "ProvisioningFailed",
                                 f'failed to provision volume with StorageClass "{cls}": create {path}: '
                                 f"{e.strerror or e}")
            raise
        log.info("local-path: provisioned %s at %s for %s", name, path, key_of(dict(pvc)))
        self.recorder.record(pvc, "Normal", "ProvisioningSucceeded",
                             f"Successfully provisioned volume {name}")

    async def delete(self, pv: Obj) -> None:
        path = (storage.spec(pv).get("hostPath") or {}).get("path", "")
        name = storage.meta(pv).get("name", "")
        try:
            await asyncio.to_thread(remove_dir, self.root, path)
        except OSError as e:
            self.recorder.record(pv, "Warning", "VolumeFailedDelete", f"remove {path}: {e.strerror or e}")
            raise
        try:
            await self.client.delete("persistentvolumes", name,
                                     preconditions={"uid": storage.meta(pv).get("uid", "")})
        except ClientError as e:
            if not (e.not_found or e.conflict):
                raise
        log.info("local-path: deleted %s (%s)", name, path)

    async def maybe_resize(self, pvc: Obj, pv: Obj) -> None:
        sc = self.classes.get(storage.volume_class(pv))
        if not wants_resize(pvc, pv, sc):
            return
        request = ((storage.spec(pvc).get("resources") or {}).get("requests") or {}).get("storage")
        ns = storage.meta(pvc).get("namespace")
        status = dict(pvc.get("status") or {})
        status["allocatedResources"] = {"storage": request}
        status["conditions"] = [{"type": "Resizing", "status": "True",
                                 "lastTransitionTime": now_rfc3339()}]
        pvc = await self.client.update("persistentvolumeclaims", {**pvc, "status": status}, ns, "status")
        self.recorder.record(pvc, "Normal", "Resizing",
                             f'External resizer is resizing volume {storage.meta(pv).get("name")}')
        new_pv = {**pv, "spec": {**storage.spec(pv), "capacity": {"storage": request}}}
        await self.client.update("persistentvolumes", new_pv)
        # a directory has no filesystem to grow: no FileSystemResizePending, the claim has its size now
        status = dict(pvc.get("status") or {})
        status["capacity"] = {"storage": request}
        status["conditions"] = []
        await self.client.update("persistentvolumeclaims", {**pvc, "status": status}, ns, "status")
        self.recorder.record(pvc, "Normal", "VolumeResizeSuccessful",
                             f'resize volume "{storage.meta(pv).get("name")}" by resizer "{PROVISIONER}" '
                             "finished successfully")
        log.info("local-path: %s resized to %s", storage.meta(pv).get("name"),
                 format_quantity(storage.capacity(new_pv), binary=True))

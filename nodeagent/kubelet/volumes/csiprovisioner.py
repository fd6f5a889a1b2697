"""external-provisioner (and external-resizer's part) for the CSI drivers registered on this node.

A small adapter in the external-provisioner pattern, run beside the kubelet in node-deployment mode: a
claim whose class names a driver registered here, selected for this node by the scheduler (or with no
selected node, for an Immediate class), becomes CreateVolume `pvc-<claim uid>` with the claim's size,
access modes, the class's parameters (minus the `csi.storage.k8s.io/` ones) and the node's topology as
requisite; the answer becomes a PV with `spec.csi`, nodeAffinity from the volume's accessible topology,
pre-bound to the claim and annotated `pv.kubernetes.io/provisioned-by`, with external-provisioner's
finalizer. A claim cloned from another claim (`dataSource` PersistentVolumeClaim) or restored from a
VolumeSnapshot passes that volume or snapshot as the content source. A Released volume with reclaimPolicy
Delete (or a deleted one) is DeleteVolume'd, then the PV goes. A bigger request on a class with
allowVolumeExpansion is ControllerExpandVolume'd. Failures are events on the claim with the driver's
message, and are retried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import grpc

from csi import client as csiclient
from csi.proto import csi_pb2 as pb
from csi.proto import csi_pb2_grpc
from nodeagent.api import csi as api
from nodeagent.api import storage
from nodeagent.api.quantity import format_quantity, int_value
from nodeagent.client.events import EventRecorder
from nodeagent.client.informer import key_of
from nodeagent.client.rest import Client, ClientError
from nodeagent.kubelet.volumes import csisnapshotter as snapshots
from nodeagent.kubelet.volumes.csi import Drivers
from nodeagent.kubelet.volumes.provisionerloop import ProvisionerLoop, on_this_node

log = logging.getLogger("nodeagent.kubelet.csiprovisioner")

RESYNC = 15.0
Obj = Mapping[str, Any]


class ProvisionError(Exception):
    pass


# -- decisions --------------------------------------------------------------------------------------------


def volume_name(pvc: Obj) -> str:
    return f"pvc-{storage.meta(pvc).get('uid')}"


def claim_provisioner(pvc: Obj) -> str:
    ann = storage.annotations_of(pvc)
    return ann.get(storage.ANN_STORAGE_PROVISIONER) or ann.get(storage.ANN_BETA_STORAGE_PROVISIONER) or ""


def wants_volume(pvc: Obj, node_name: str, drivers: Drivers) -> bool:
    """A claim this node's provisioner serves: its driver is registered here, not yet bound, and selected
    for this node (or not selected at all: an Immediate class)."""
    selected = storage.annotations_of(pvc).get(storage.ANN_SELECTED_NODE)
    return (drivers.endpoint(claim_provisioner(pvc)) is not None and selected in (None, "", node_name)
            and not storage.spec(pvc).get("volumeName") and not storage.meta(pvc).get("deletionTimestamp"))


def create_request(pvc: Obj, sc: Obj, requisite: list[dict[str, str]], source: tuple[str, str] = ("", ""),
                   ) -> pb.CreateVolumeRequest:
    """CreateVolume for a claim (external-provisioner's controller.go Provision)."""
    params = {k: str(v) for k, v in (sc.get("parameters") or {}).items()}
    fs_type = params.get(api.PARAM_FSTYPE, "")
    if storage.volume_mode(pvc) == "Block":
        access_type: dict[str, Any] = {"block": pb.VolumeCapability.BlockVolume()}
    else:
        flags = list(sc.get("mountOptions") or [])
        access_type = {"mount": pb.VolumeCapability.MountVolume(fs_type=fs_type, mount_flags=flags)}
    modes = list(storage.spec(pvc).get("accessModes") or ["ReadWriteOnce"])
    Mode = pb.VolumeCapability.AccessMode
    caps = [pb.VolumeCapability(access_mode=Mode(mode=api.csi_access_mode([m], False)), **access_type)
            for m in modes]
    resources = storage.spec(pvc).get("resources") or {}
    limit = (resources.get("limits") or {}).get("storage")
    req = pb.CreateVolumeRequest(
        name=volume_name(pvc), volume_capabilities=caps,
        parameters={k: v for k, v in params.items() if not k.startswith(api.PARAM_PREFIX)},
        capacity_range=pb.CapacityRange(required_bytes=storage.requested_storage(pvc),
                                        limit_bytes=int_value(limit) if limit else 0))
    for t in requisite:
        req.accessibility_requirements.requisite.append(pb.Topology(segments=t))
        req.accessibility_requirements.preferred.append(pb.Topology(segments=t))
    kind, handle = source  # ("volume" | "snapshot", its handle), or ("", "")
    if kind == "volume":
        req.volume_content_source.volume.volume_id = handle
    elif kind == "snapshot":
        req.volume_content_source.snapshot.snapshot_id = handle
    return req


def volume_for(pvc: Obj, sc: Obj, driver: str, vol: pb.Volume, identity: str) -> dict[str, Any]:
    """The PV for a created volume."""
    m = storage.meta(pvc)
    params = sc.get("parameters") or {}
    size = vol.capacity_bytes or storage.requested_storage(pvc)
    attributes = {**dict(vol.volume_context), api.PROVISIONER_IDENTITY: identity}
    source: dict[str, Any] = {"driver": driver, "volumeHandle": vol.volume_id, "volumeAttributes": attributes}
    if params.get(api.PARAM_FSTYPE):
        source["fsType"] = params[api.PARAM_FSTYPE]
    spec: dict[str, Any] = {
        "capacity": {"storage": format_quantity(size, binary=True)},
        "accessModes": list(storage.spec(pvc).get("accessModes") or ["ReadWriteOnce"]),
        "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy") or "Delete",
        "storageClassName": storage.meta(sc).get("name"),
        "volumeMode": storage.volume_mode(pvc),
        "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": m.get("namespace"),
                     "name": m.get("name"), "uid": m.get("uid"), "resourceVersion": m.get("resourceVersion")},
        "csi": source,
    }
    if sc.get("mountOptions"):
        spec["mountOptions"] = list(sc["mountOptions"])
    terms = [{"matchExpressions": [{"key": k, "operator": "In", "values": [v]}
                                   for k, v in sorted(t.segments.items())]}
             for t in vol.accessible_topology if t.segments]
    if terms:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": terms}}
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": volume_name(pvc), "annotations": {storage.ANN_PROVISIONED_BY: driver},
                         "finalizers": [api.PROVISIONER_FINALIZER]},
            "spec": spec}


def requisite_for(node: Obj, csinode: Obj | None, driver: str) -> list[dict[str, str]]:
    """The selected node's topology for the driver: its CSINode topologyKeys, valued from its labels."""
    keys = next((d.get("topologyKeys") or [] for d in ((csinode or {}).get("spec") or {}).get("drivers") or []
                 if d.get("name") == driver), [])
    labels = storage.meta(node).get("labels") or {}
    seg = {k: labels[k] for k in keys if k in labels}
    return [seg] if seg else []


def allowed_topologies(sc: Obj) -> list[dict[str, str]]:
    """A class's allowedTopologies as CSI topologies (each term's expressions crossed: one topology per
    combination of values), external-provisioner's requisite when no node was selected."""
    out: list[dict[str, str]] = []
    for term in sc.get("allowedTopologies") or []:
        combos: list[dict[str, str]] = [{}]
        for e in term.get("matchLabelExpressions") or []:
            combos = [{**c, e.get("key", ""): v} for c in combos for v in e.get("values") or []]
        out += [c for c in combos if c]
    return out


def csi_source(pv: Obj) -> Mapping[str, Any]:
    return storage.spec(pv).get("csi") or {}


def wants_delete(pv: Obj) -> bool:
    deleting = bool(storage.meta(pv).get("deletionTimestamp"))
    released = (pv.get("status") or {}).get("phase") in ("Released", "Failed")
    return storage.spec(pv).get("persistentVolumeReclaimPolicy") == "Delete" and (released or deleting)


# -- the loop ---------------------------------------------------------------------------------------------


class CSIProvisioner(ProvisionerLoop):
    name = "csi-provisioner"
    log = log
    resync = RESYNC

    def __init__(self, client: Client, node_name: str, drivers: Drivers, recorder: EventRecorder) -> None:
        super().__init__(client, node_name, recorder)
        self.drivers = drivers
        self.identity = f"{int(time.time() * 1000)}-{node_name}"

    def wants_claim(self, pvc: Obj) -> bool:
        return wants_volume(pvc, self.node_name, self.drivers)

    def wants_delete(self, pv: Obj) -> bool:
        return wants_delete(pv)

    def is_ours(self, pv: Obj) -> bool:
        driver = storage.annotations_of(pv).get(storage.ANN_PROVISIONED_BY, "")
        return self.drivers.endpoint(driver) is not None

    def resizes(self, pv: Obj) -> bool:
        return self.drivers.endpoint(csi_source(pv).get("driver", "")) is not None

    # -- provisioning -----------------------------------------------------------------------------------

    async def provision(self, pvc: Obj) -> None:
        if self.volumes.get(volume_name(pvc)) is not None:
            return
        cls = storage.claim_class(pvc)
        driver = claim_provisioner(pvc)
        endpoint = self.drivers.endpoint(driver)
        sc = self.classes.get(cls)
        if sc is None or endpoint is None or sc.get("provisioner") != driver:
            return
        self.recorder.record(pvc, "Normal", "Provisioning",
                             f'External provisioner is provisioning volume for claim "{key_of(dict(pvc))}"')
        try:
            req = create_request(pvc, sc, await self._requisite(pvc, driver), await self._source(pvc))
            async with csiclient.aio_channel(endpoint) as ch:
                stub = csi_pb2_grpc.ControllerStub(ch)
                try:
                    res = await stub.CreateVolume(req, timeout=csiclient.TIMEOUT)
                except grpc.RpcError as e:
                    raise ProvisionError(csiclient.describe(e)) from None
                pv = volume_for(pvc, sc, driver, res.volume, self.identity)
                try:
                    await self.client.create("persistentvolumes", pv)
                except ClientError as e:
                    if e.already_exists and await self._already_published(pv, res.volume.volume_id):
                        return  # our own earlier answer (CreateVolume is idempotent by name), seen late
                    # someone else's volume won (another node's instance, for an Immediate class): ours goes
                    await stub.DeleteVolume(pb.DeleteVolumeRequest(volume_id=res.volume.volume_id),
                                            timeout=csiclient.TIMEOUT)
                    if e.already_exists:
                        return
                    raise ProvisionError(e.message) from None
        except ProvisionError as e:
            self.recorder.record(pvc, "Warning", "ProvisioningFailed",
                                 f'failed to provision volume with StorageClass "{cls}": {e}')
            raise
        log.info("csi provisioner: %s provisioned %s (%s) for %s", driver, pv["metadata"]["name"],
                 res.volume.volume_id, key_of(dict(pvc)))
        self.recorder.record(pvc, "Normal", "ProvisioningSucceeded",
                             f"Successfully provisioned volume {pv['metadata']['name']}")

    async def _already_published(self, pv: Obj, volume_id: str) -> bool:
        """The PV of that name already holds this very volume: a sync that ran before the informer saw the
        PV an earlier one made got the same volume back, which must not be deleted under it (as
        external-provisioner reuses a PV that already exists)."""
        try:
            existing = await self.client.get("persistentvolumes", storage.meta(pv).get("name", ""))
        except ClientError:
            return False
        return csi_source(existing).get("volumeHandle") == volume_id

    async def _requisite(self, pvc: Obj, driver: str) -> list[dict[str, str]]:
        selected = storage.annotations_of(pvc).get(storage.ANN_SELECTED_NODE)
        if not selected:
            sc = self.classes.get(storage.claim_class(pvc))
            return allowed_topologies(sc) if sc else []
        try:
            node = await self.client.get("nodes", selected)
            csinode = await self.client.get("csinodes", selected)
        except ClientError as e:
            raise ProvisionError(f"the selected node {selected}: {e.message}") from None
        return requisite_for(node, csinode, driver)

    async def _source(self, pvc: Obj) -> tuple[str, str]:
        """The claim's content source: ("volume", a cloned claim's volume handle), ("snapshot", a ready
        VolumeSnapshot's handle) or ("", ""); other data sources are refused with the reason."""
        ds = storage.spec(pvc).get("dataSourceRef") or storage.spec(pvc).get("dataSource")
        if not ds:
            return "", ""
        ns = storage.meta(pvc).get("namespace") or "default"
        if ds.get("kind") == "VolumeSnapshot" and ds.get("apiGroup") == snapshots.GROUP:
            try:
                handle, size = await snapshots.snapshot_handle(self.client, ns, ds.get("name", ""))
            except snapshots.SnapshotError as e:
                raise ProvisionError(str(e)) from None
            if size and storage.requested_storage(pvc) < size:
                raise ProvisionError(f"requested volume size {storage.requested_storage(pvc)} is less than "
                                     f"the size {size} of the data source snapshot {ds.get('name')}")
            return "snapshot", handle
        if ds.get("kind") != "PersistentVolumeClaim" or ds.get("apiGroup"):
            raise ProvisionError(f"data source {ds.get('apiGroup') or 'core'}/{ds.get('kind')} is not "
                                 "supported (a PersistentVolumeClaim or a snapshot.storage.k8s.io "
                                 "VolumeSnapshot can be)")
        src = self.claims.get(ds.get("name", ""), ns)
        vname = storage.spec(src or {}).get("volumeName")
        pv = self.volumes.get(vname) if vname else None
        if pv is None:
            raise ProvisionError(f"the source claim {ns}/{ds.get('name')} is not bound")
        if storage.volume_class(pv) != storage.claim_class(pvc):
            raise ProvisionError("the source claim's StorageClass differs from the claim's")
        return "volume", csi_source(pv).get("volumeHandle", "")

    # -- deletion ---------------------------------------------------------------------------------------

    async def delete(self, pv: Obj) -> None:
        src = csi_source(pv)
        name = storage.meta(pv).get("name", "")
        endpoint = self.drivers.endpoint(src.get("driver", ""))
        if endpoint is None:
            return
        if not await on_this_node(self.client, self.node_name, pv):
            return  # another node's instance owns it (its affinity names that node)
        async with csiclient.aio_channel(endpoint) as ch:
            try:
                await csi_pb2_grpc.ControllerStub(ch).DeleteVolume(
                    pb.DeleteVolumeRequest(volume_id=src.get("volumeHandle", "")), timeout=csiclient.TIMEOUT)
            except grpc.RpcError as e:
                self.recorder.record(pv, "Warning", "VolumeFailedDelete", csiclient.describe(e))
                raise
        fin = [f for f in storage.meta(pv).get("finalizers") or [] if f != api.PROVISIONER_FINALIZER]
        try:
            await self.client.patch("persistentvolumes", name, {"metadata": {
                "finalizers": fin, "resourceVersion": storage.meta(pv).get("resourceVersion")}})
            if not storage.meta(pv).get("deletionTimestamp"):
                await self.client.delete("persistentvolumes", name,
                                         preconditions={"uid": storage.meta(pv).get("uid", "")})
        except ClientError as e:
            if not (e.not_found or e.conflict):
                raise
        log.info("csi provisioner: deleted %s (%s)", name, src.get("volumeHandle"))

    # -- expansion --------------------------------------------------------------------------------------

    async def maybe_resize(self, pvc: Obj, pv: Obj) -> None:
        sc = self.classes.get(storage.volume_class(pv))
        if not (sc and sc.get("allowVolumeExpansion")) or (pvc.get("status") or {}).get("phase") != "Bound" \
                or storage.requested_storage(pvc) <= storage.capacity(pv):
            return
        src = csi_source(pv)
        endpoint = self.drivers.endpoint(src.get("driver", ""))
        if endpoint is None or not await on_this_node(self.client, self.node_name, pv):
            return
        want = storage.requested_storage(pvc)
        name = storage.meta(pv).get("name", "")
        self.recorder.record(pvc, "Normal", "Resizing", f"External resizer is resizing volume {name}")
        async with csiclient.aio_channel(endpoint) as ch:
            try:
                res = await csi_pb2_grpc.ControllerStub(ch).ControllerExpandVolume(
                    pb.ControllerExpandVolumeRequest(volume_id=src.get("volumeHandle", ""),
                                                     capacity_range=pb.CapacityRange(required_bytes=want)),
                    timeout=csiclient.TIMEOUT)
            except grpc.RpcError as e:
                self.recorder.record(pvc, "Warning", "VolumeResizeFailed",
                                     f"resize volume {name} failed: {csiclient.describe(e)}")
                raise
        size = format_quantity(max(res.capacity_bytes, want), binary=True)
        await self.client.patch("persistentvolumes", name, {"spec": {"capacity": {"storage": size}}})
        ns = storage.meta(pvc).get("namespace")
        status = {**(pvc.get("status") or {}), "capacity": {"storage": size}, "conditions": [],
                  "allocatedResources": {"storage": size}}
        await self.client.update("persistentvolumeclaims", {**pvc, "status": status}, ns, "status")
        self.recorder.record(pvc, "Normal", "VolumeResizeSuccessful",
                             f'resize volume "{name}" by resizer "{src.get("driver")}" finished successfully')

"""VolumeSnapshots of CSI volumes: snapshot-controller's and csi-snapshotter's parts for the drivers
registered on this node (snapshot.storage.k8s.io/v1, the external-snapshotter CRDs the server installs).

A VolumeSnapshot of a claim whose volume a driver registered here made (and lives on this node) becomes
CreateSnapshot `snapshot-<snapshot uid>` on that volume, a VolumeSnapshotContent `snapcontent-<snapshot
uid>` (driver, deletionPolicy from its VolumeSnapshotClass, the snapshot handle, readyToUse, restoreSize)
bound to it, and the snapshot's status (boundVolumeSnapshotContentName, creationTime, readyToUse,
restoreSize). The class is the one named, or the driver's default class
(`snapshot.storage.kubernetes.io/is-default-class`); a snapshot with no usable class, or of a claim that
is not bound, says why in its status error and an event. When the snapshot is deleted, a content with
deletionPolicy Delete is DeleteSnapshot'd and removed; Retain keeps both. A pre-provisioned content
(`source.snapshotHandle`) is served as it is. The provisioner restores a claim whose dataSource is a ready
snapshot (CreateVolume from its snapshot handle).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from csi import client as csiclient
from csi.proto import csi_pb2 as pb
from csi.proto import csi_pb2_grpc
from nodeagent.api import storage
from nodeagent.api.quantity import format_quantity
from nodeagent.api.times import now_rfc3339
from nodeagent.client.events import EventRecorder
from nodeagent.client.informer import key_of, shared
from nodeagent.client.rest import Client, ClientError
from nodeagent.kubelet.volumes.csi import Drivers
from nodeagent.kubelet.volumes.keyloop import KeyLoop
from nodeagent.kubelet.volumes.provisionerloop import on_this_node

log = logging.getLogger("nodeagent.kubelet.csisnapshotter")

GROUP = "snapshot.storage.k8s.io"
SNAPSHOTS = f"{GROUP}/v1/volumesnapshots"
CONTENTS = f"{GROUP}/v1/volumesnapshotcontents"
CLASSES = f"{GROUP}/v1/volumesnapshotclasses"
ANN_DEFAULT_CLASS = "snapshot.storage.kubernetes.io/is-default-class"
RESYNC = 15.0
ACCESS_RECHECK = 60.0  # seconds between checks that a refused credential may now serve snapshots
ACCESS_RETRY = 2.0  # seconds before asking again when the apiserver did not answer
RUNNER_ROLE = "snapshot-controller-runner"  # the bootstrap ClusterRole with the snapshotter's rights
# what the snapshotter must be allowed: (verb, resource) in snapshot.storage.k8s.io
NEEDED = (("list", "volumesnapshots"), ("watch", "volumesnapshots"), ("create", "volumesnapshotcontents"))
Obj = Mapping[str, Any]


class SnapshotError(Exception):
    pass


def content_name(vs: Obj) -> str:
    return f"snapcontent-{storage.meta(vs).get('uid')}"


def snapshot_class_for(vs: Obj, classes: Sequence[Obj], driver: str) -> Obj:
    """The snapshot's VolumeSnapshotClass: the one it names (of this driver), else the driver's default."""
    name = (vs.get("spec") or {}).get("volumeSnapshotClassName")
    if name:
        cls = next((c for c in classes if storage.meta(c).get("name") == name), None)
        if cls is None:
            raise SnapshotError(f'volumesnapshotclass.snapshot.storage.k8s.io "{name}" not found')
        if cls.get("driver") != driver:
            raise SnapshotError(f'VolumeSnapshotClass "{name}" is for driver {cls.get("driver")}, not the '
                                f"volume's driver {driver}")
        return cls
    defaults = [c for c in classes if c.get("driver") == driver
                and storage.annotations_of(c).get(ANN_DEFAULT_CLASS) == "true"]
    if len(defaults) != 1:
        raise SnapshotError(f"cannot find a default snapshot class for driver {driver}" if not defaults else
                            f"{len(defaults)} default snapshot classes were found for driver {driver}")
    return defaults[0]


def content_for(vs: Obj, cls: Obj, volume_handle: str, driver: str) -> dict[str, Any]:
    m = storage.meta(vs)
    return {"apiVersion": f"{GROUP}/v1", "kind": "VolumeSnapshotContent",
            "metadata": {"name": content_name(vs)},
            "spec": {"deletionPolicy": cls.get("deletionPolicy") or "Delete", "driver": driver,
                     "source": {"volumeHandle": volume_handle},
                     "volumeSnapshotClassName": storage.meta(cls).get("name"),
                     "volumeSnapshotRef": {"apiVersion": f"{GROUP}/v1", "kind": "VolumeSnapshot",
                                           "name": m.get("name"), "namespace": m.get("namespace"),
                                           "uid": m.get("uid"), "resourceVersion": m.get("resourceVersion")}}}


def rfc3339_of(ts: Any) -> str:
    import datetime

    t = datetime.datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, datetime.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class CSISnapshotter(KeyLoop):
    name = "csi-snapshotter"
    log = log
    resync = RESYNC

    def __init__(self, client: Client, node_name: str, drivers: Drivers, recorder: EventRecorder) -> None:
        super().__init__()
        self.client = client
        self.node_name = node_name
        self.drivers = drivers
        self.recorder = recorder
        # the process's informers (the provisioners' claims and volumes, the garbage collector's reads)
        self.snapshots = shared(client, SNAPSHOTS)
        self.contents = shared(client, CONTENTS)
        self.classes = shared(client, CLASSES)
        self.claims = shared(client, "persistentvolumeclaims")
        self.volumes = shared(client, "persistentvolumes")
        self.informers = (self.snapshots, self.contents, self.classes, self.claims, self.volumes)
        self.snapshots.add_handler(self._snapshot, lambda old, new: self._snapshot(new), self._snapshot_gone)
        self.contents.add_handler(self._content, lambda old, new: self._content(new), None)

    async def run(self) -> None:
        """The loop, once this client may serve snapshots. A joined node's own credential may not (kube's
        Node authorizer and system:node give a node no VolumeSnapshot rights; external-snapshotter runs under
        a ServiceAccount of its own): until it may, the loop waits, having said why and what to do in a log
        line and a Warning event on the Node, and checks again every minute."""
        told = False
        while True:
            try:
                why = await self.refused()
            except ClientError as e:
                if 400 <= e.code < 500 and e.code != 429:  # may not even ask: a refusal too
                    why = f"its credential may not ask what it may do ({e})"
                else:  # the apiserver not answering yet (`up` starting): not a refusal
                    log.debug("csi-snapshotter: cannot check its access yet (%s); retrying", e)
                    await asyncio.sleep(ACCESS_RETRY)
                    continue
            if why is None:
                break
            if not told:
                msg = (f"VolumeSnapshots of this node's CSI volumes are not served: {why}. Run the agent "
                       "with --snapshot-kubeconfig (a kubeconfig of ServiceAccount "
                       f"kube-system/snapshot-controller), or bind this node's user to ClusterRole "
                       f"{RUNNER_ROLE}: kubectl create clusterrolebinding snapshots-{self.node_name} "
                       f"--clusterrole={RUNNER_ROLE} --user=system:node:{self.node_name}")
                log.warning("%s", msg)
                self.recorder.record({"apiVersion": "v1", "kind": "Node",
                                      "metadata": {"name": self.node_name, "uid": self.node_name}},
                                     "Warning", "SnapshotterNotAuthorized", msg)
                told = True
            await asyncio.sleep(ACCESS_RECHECK)
        if told:
            log.info("csi-snapshotter: this credential may serve VolumeSnapshots now; starting")
        await super().run()

    async def refused(self) -> str | None:
        """Why this client may not serve snapshots (a SelfSubjectAccessReview per right), or None;
        ClientError when the apiserver does not answer."""
        for verb, resource in NEEDED:
            out = await self.client.create("selfsubjectaccessreviews", {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"verb": verb, "group": GROUP, "resource": resource}}})
            st = out.get("status") or {}
            if not st.get("allowed") or st.get("denied"):
                return f"its credential may not {verb} {resource}.{GROUP}"
        return None

    def _snapshot(self, vs: Obj) -> None:
        self.add("snapshot:" + key_of(dict(vs)))

    def _snapshot_gone(self, vs: Obj) -> None:
        self.add("content:" + content_name(vs))

    def _content(self, vsc: Obj) -> None:
        if self.drivers.endpoint((vsc.get("spec") or {}).get("driver", "")) is not None:
            self.add("content:" + storage.meta(vsc).get("name", ""))

    def poke_all(self) -> None:
        for vs in self.snapshots.list():
            self._snapshot(vs)
        for vsc in self.contents.list():
            self._content(vsc)

    async def sync(self, key: str) -> None:
        kind, _, rest = key.partition(":")
        if kind == "content":
            vsc = self.contents.get(rest)
            if vsc is not None:
                await self._sync_content(vsc)
            return
        ns, _, name = rest.rpartition("/")
        vs = self.snapshots.get(name, ns)
        if vs is not None and not storage.meta(vs).get("deletionTimestamp"):
            await self._sync_snapshot(vs)

    # -- a snapshot -------------------------------------------------------------------------------------

    async def _sync_snapshot(self, vs: Obj) -> None:
        status = vs.get("status") or {}
        if status.get("readyToUse"):
            return
        source = (vs.get("spec") or {}).get("source") or {}
        if source.get("volumeSnapshotContentName"):
            await self._bind_preprovisioned(vs, source["volumeSnapshotContentName"])
            return
        ns = storage.meta(vs).get("namespace")
        pvc = self.claims.get(source.get("persistentVolumeClaimName", ""), ns)
        vname = storage.spec(pvc or {}).get("volumeName")
        pv = self.volumes.get(vname) if vname else None
        csi = storage.spec(pv or {}).get("csi") or {}
        driver = csi.get("driver", "")
        if pv is None or self.drivers.endpoint(driver) is None or \
                not await on_this_node(self.client, self.node_name, pv):
            if pvc is not None and not vname and self._claim_is_ours(pvc):
                await self._fail(vs, f"the claim {ns}/{storage.meta(pvc).get('name')} is not bound")
            return  # another node's, or not a CSI volume of ours
        try:
            cls = snapshot_class_for(vs, self.classes.list(), driver)
        except SnapshotError as e:
            await self._fail(vs, str(e))
            return
        endpoint = self.drivers.endpoint(driver) or ""
        async with csiclient.aio_channel(endpoint) as ch:
            params = {k: str(v) for k, v in (cls.get("parameters") or {}).items()
                      if not k.startswith("csi.storage.k8s.io/")}
            req = pb.CreateSnapshotRequest(name=f"snapshot-{storage.meta(vs).get('uid')}",
                                           source_volume_id=csi.get("volumeHandle", ""), parameters=params)
            try:
                res = await csi_pb2_grpc.ControllerStub(ch).CreateSnapshot(req, timeout=csiclient.TIMEOUT)
            except grpc.RpcError as e:
                await self._fail(vs, f"failed to take snapshot of the volume {vname}: "
                                     f"{csiclient.describe(e)}")
                raise
        snap = res.snapshot
        content = await self._ensure_content(content_for(vs, cls, csi.get("volumeHandle", ""), driver))
        created = rfc3339_of(snap.creation_time)
        size = format_quantity(snap.size_bytes, binary=True)
        cstatus = {"snapshotHandle": snap.snapshot_id, "creationTime": snap.creation_time.ToNanoseconds(),
                   "readyToUse": snap.ready_to_use, "restoreSize": snap.size_bytes}
        await self.client.update(CONTENTS, {**content, "status": cstatus}, subresource="status")
        vstatus = {"boundVolumeSnapshotContentName": content_name(vs), "creationTime": created,
                   "readyToUse": snap.ready_to_use, "restoreSize": size}
        await self.client.update(SNAPSHOTS, {**vs, "status": vstatus}, ns, "status")
        self.recorder.record(vs, "Normal", "SnapshotCreated", f"Snapshot {key_of(dict(vs))} was successfully "
                             "created by the CSI driver.")
        if snap.ready_to_use:
            self.recorder.record(vs, "Normal", "SnapshotReady",
                                 f"Snapshot {key_of(dict(vs))} is ready to use.")
        log.info("csi snapshotter: %s snapshot %s of %s", driver, snap.snapshot_id, vname)

    def _claim_is_ours(self, pvc: Obj) -> bool:
        ann = storage.annotations_of(pvc)
        prov = ann.get(storage.ANN_STORAGE_PROVISIONER) or ann.get(storage.ANN_BETA_STORAGE_PROVISIONER) or ""
        return self.drivers.endpoint(prov) is not None and \
            ann.get(storage.ANN_SELECTED_NODE) in (None, "", self.node_name)

    async def _ensure_content(self, want: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self.client.create(CONTENTS, want)
        except ClientError as e:
            if not e.already_exists:
                raise
        return await self.client.get(CONTENTS, want["metadata"]["name"])

    async def _bind_preprovisioned(self, vs: Obj, name: str) -> None:
        vsc = self.contents.get(name)
        if vsc is None or self.drivers.endpoint((vsc.get("spec") or {}).get("driver", "")) is None:
            return
        st = vsc.get("status") or {}
        handle = ((vsc.get("spec") or {}).get("source") or {}).get("snapshotHandle")
        if not st.get("snapshotHandle") and handle:
            st = {"snapshotHandle": handle, "readyToUse": True}
            await self.client.update(CONTENTS, {**vsc, "status": st}, subresource="status")
        vstatus = {"boundVolumeSnapshotContentName": name, "readyToUse": bool(st.get("readyToUse"))}
        if st.get("restoreSize") is not None:
            vstatus["restoreSize"] = format_quantity(int(st["restoreSize"]), binary=True)
        await self.client.update(SNAPSHOTS, {**vs, "status": vstatus}, storage.meta(vs).get("namespace"),
                                 "status")

    async def _fail(self, vs: Obj, message: str) -> None:
        self.recorder.record(vs, "Warning", "SnapshotCreationFailed", message)
        status = {**(vs.get("status") or {}), "readyToUse": False,
                  "error": {"message": message, "time": now_rfc3339()}}
        try:
            await self.client.update(SNAPSHOTS, {**vs, "status": status}, storage.meta(vs).get("namespace"),
                                     "status")
        except ClientError as e:
            if not (e.conflict or e.not_found):
                raise

    # -- a content whose snapshot is gone ---------------------------------------------------------------

    async def _sync_content(self, vsc: Obj) -> None:
        spec = vsc.get("spec") or {}
        ref = spec.get("volumeSnapshotRef") or {}
        vs = self.snapshots.get(ref.get("name", ""), ref.get("namespace"))
        if vs is not None and storage.meta(vs).get("uid") == ref.get("uid"):
            return  # still bound to its snapshot
        if spec.get("deletionPolicy") != "Delete" or not (spec.get("source") or {}).get("volumeHandle"):
            return  # Retain, or pre-provisioned: the admin's
        handle = (vsc.get("status") or {}).get("snapshotHandle")
        endpoint = self.drivers.endpoint(spec.get("driver", ""))
        if endpoint is None:
            return
        if handle:
            async with csiclient.aio_channel(endpoint) as ch:
                await csi_pb2_grpc.ControllerStub(ch).DeleteSnapshot(
                    pb.DeleteSnapshotRequest(snapshot_id=handle), timeout=csiclient.TIMEOUT)
        try:
            await self.client.delete(CONTENTS, storage.meta(vsc).get("name", ""))
        except ClientError as e:
            if not e.not_found:
                raise
        log.info("csi snapshotter: deleted snapshot %s (%s)", storage.meta(vsc).get("name"), handle)


async def snapshot_handle(client: Client, namespace: str, name: str) -> tuple[str, int]:
    """A ready VolumeSnapshot's (snapshot handle, restore size in bytes), for a claim restored from it."""
    try:
        vs = await client.get(SNAPSHOTS, name, namespace)
    except ClientError as e:
        raise SnapshotError(f"error getting snapshot {name} from api server: {e.message}") from None
    st = vs.get("status") or {}
    if not st.get("readyToUse") or not st.get("boundVolumeSnapshotContentName"):
        raise SnapshotError(f"snapshot {name} is not Ready")
    vsc = await client.get(CONTENTS, st["boundVolumeSnapshotContentName"])
    handle = (vsc.get("status") or {}).get("snapshotHandle")
    if not handle:
        raise SnapshotError(f"snapshot {name}'s content has no snapshot handle")
    return handle, int((vsc.get("status") or {}).get("restoreSize") or 0)

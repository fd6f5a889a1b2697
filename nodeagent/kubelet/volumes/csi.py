"""The kubelet's CSI volume plugin (pkg/volume/csi): a pod's CSI volume, staged and published by its driver.

A persistent volume (a PV with `spec.csi`) is staged once per node at
`<root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount` (NodeStageVolume, when the driver
has STAGE_UNSTAGE_VOLUME) and published for each pod at
`<root>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount` (NodePublishVolume); an inline volume
(`volumes[].csi`, the Ephemeral lifecycle mode) is published only, with the handle
`csi-<sha256(pod uid + volume name)>`. Each directory carries a `vol_data.json` naming the driver and the
handle, as the kubelet's does, so teardown works from disk alone — after a restart too. Unstage follows
the last pod's unpublish. The CSIDriver object decides: `attachRequired` (this cluster runs no
attach/detach controller, so a driver that needs attaching is refused with that reason), `podInfoOnMount`
(the pod's name, namespace, uid and service account in the volume context), `volumeLifecycleModes`
and `fsGroupPolicy`. Blocking: runs on the volume manager's worker thread.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import grpc

from csi import client as csiclient
from csi.proto import csi_pb2 as pb
from csi.proto import csi_pb2_grpc
from kernel import mounts
from nodeagent.api import csi as api
from nodeagent.kubelet.volumes import ownership
from nodeagent.kubelet.volumes.payloads import VolumeSourceError
from nodeagent.kubelet.volumes.plugins import PluginVolume

log = logging.getLogger("nodeagent.kubelet.csi")

PLUGIN_DIR = "kubernetes.io~csi"
VOL_DATA = "vol_data.json"
Getter = Callable[[str, str], dict[str, Any] | None]
NodeRPC = pb.NodeServiceCapability.RPC


class Drivers:
    """The CSI drivers registered with this kubelet (name → endpoint), written by the plugin manager and read
    by the volume plugin's threads."""

    def __init__(self) -> None:
        self._endpoints: dict[str, str] = {}
        self._lock = threading.Lock()

    def add(self, name: str, endpoint: str) -> None:
        with self._lock:
            self._endpoints[name] = endpoint

    def remove(self, name: str) -> None:
        with self._lock:
            self._endpoints.pop(name, None)

    def endpoint(self, name: str) -> str | None:
        with self._lock:
            return self._endpoints.get(name)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._endpoints)


def write_vol_data(directory: Path, data: Mapping[str, str]) -> None:
    from kernel.fs import atomic_write

    atomic_write(directory / VOL_DATA, json.dumps(dict(data), sort_keys=True), 0o644)


def read_vol_data(directory: Path) -> dict[str, str] | None:
    try:
        return json.loads((directory / VOL_DATA).read_text())
    except (FileNotFoundError, ValueError):
        return None


class CSIPlugin:
    def __init__(self, root: str | os.PathLike, node_name: str, drivers: Drivers,
                 get_driver: Getter | None = None, get_secret: Getter | None = None) -> None:
        self.root = Path(root)
        self.node_name = node_name
        self.drivers = drivers
        self.get_driver = get_driver  # ("", name) → CSIDriver
        self.get_secret = get_secret  # (namespace, name) → Secret
        self._caps: dict[str, set[int]] = {}
        # each call's (driver, "/csi.v1.Node/<rpc>", gRPC code, seconds): the csi_operations_seconds metric
        self.observe: Callable[[str, str, str, float], None] | None = None

    # -- the driver -------------------------------------------------------------------------------------

    def _stub(self, driver: str) -> tuple[grpc.Channel, csi_pb2_grpc.NodeStub]:
        endpoint = self.drivers.endpoint(driver)
        if endpoint is None:
            raise VolumeSourceError(f"kubernetes.io/csi: failed to get CSI client: driver name {driver} not "
                                    "found in the list of registered CSI drivers")
        ch = csiclient.channel(endpoint)
        return ch, csi_pb2_grpc.NodeStub(ch)

    def _call(self, driver: str, rpc: str, request: Any) -> Any:
        """One Node service call; a failure is a VolumeSourceError (FailedMount) with the driver's code."""
        ch, stub = self._stub(driver)
        start, code = time.monotonic(), "OK"
        try:
            return getattr(stub, rpc)(request, timeout=csiclient.TIMEOUT)
        except grpc.RpcError as e:
            code = csiclient.GO_NAMES.get(e.code(), "Unknown") if hasattr(e, "code") else "Unknown"
            raise VolumeSourceError(f"kubernetes.io/csi: {rpc} failed: {csiclient.describe(e)}") from None
        finally:
            ch.close()
            if self.observe is not None:
                self.observe(driver, f"/csi.v1.Node/{rpc}", code, time.monotonic() - start)

    def _node_caps(self, driver: str) -> set[int]:
        if driver not in self._caps:
            res = self._call(driver, "NodeGetCapabilities", pb.NodeGetCapabilitiesRequest())
            self._caps[driver] = {c.rpc.type for c in res.capabilities}
        return self._caps[driver]

    def forget(self, driver: str) -> None:
        """The driver (re)registered: ask its capabilities again."""
        self._caps.pop(driver, None)

    def _driver_spec(self, driver: str) -> dict[str, Any]:
        return api.driver_spec(self.get_driver("", driver) if self.get_driver else None)

    def _secrets(self, ref: Mapping[str, Any] | None, default_ns: str) -> dict[str, str]:
        if not ref or not ref.get("name"):
            return {}
        ns = ref.get("namespace") or default_ns
        secret = self.get_secret(ns, ref["name"]) if self.get_secret else None
        if secret is None:
            raise VolumeSourceError(f'kubernetes.io/csi: failed to find the secret {ref["name"]} in the '
                                    f"namespace {ns}")
        data = secret.get("data") or {}
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}

    # -- setup ------------------------------------------------------------------------------------------

    # -- the manager's VolumePlugin interface (kubelet/volumes/plugins.py) -----------------------------------

    def dir_name(self, volume: PluginVolume) -> str:
        return PLUGIN_DIR

    def owns(self, dir_name: str) -> bool:
        return dir_name == PLUGIN_DIR

    def supports_metrics(self, target: Path) -> bool:
        return True  # a published CSI volume is a mount of its own: statfs, as NodeGetVolumeStats reports

    def setup(self, pod: Mapping[str, Any], volume: PluginVolume, target: Path) -> Path:
        """Stage (persistent volumes) and publish the volume for the pod at `<target>/mount`."""
        return Path(self.publish(pod, volume.name, volume.source, volume.read_only, volume.pv, target))

    def publish(self, pod: Mapping[str, Any], spec_name: str, source: Mapping[str, Any], read_only: bool,
                pv: Mapping[str, Any] | None, vol_dir: Path) -> str:
        """Stage (persistent volumes) and publish the volume for the pod; returns the mount path."""
        meta = pod.get("metadata") or {}
        uid, ns = meta.get("uid", ""), meta.get("namespace") or "default"
        driver = source.get("driver") or ""
        if not driver:
            raise VolumeSourceError("kubernetes.io/csi: the volume names no driver")
        ephemeral = pv is None
        mode = "Ephemeral" if ephemeral else "Persistent"
        dspec = self._driver_spec(driver)
        if mode not in dspec["volumeLifecycleModes"]:
            raise VolumeSourceError(f"kubernetes.io/csi: CSIDriver {driver} does not support the {mode} "
                                    f"volume lifecycle mode (volumeLifecycleModes: "
                                    f"{dspec['volumeLifecycleModes']})")
        if dspec["attachRequired"] and not ephemeral:
            raise VolumeSourceError(f"kubernetes.io/csi: CSIDriver {driver} requires attaching "
                                    "(attachRequired: true), and this cluster runs no attach/detach "
                                    "controller nor external-attacher to make its VolumeAttachment")
        handle = api.ephemeral_volume_handle(uid, spec_name) if ephemeral else source.get("volumeHandle", "")
        if not handle:
            raise VolumeSourceError("kubernetes.io/csi: the PersistentVolume's csi.volumeHandle is empty")
        caps = self._node_caps(driver)
        modes = list((pv or {}).get("spec", {}).get("accessModes") or ["ReadWriteOnce"])
        access = api.csi_access_mode(modes, NodeRPC.SINGLE_NODE_MULTI_WRITER in caps)
        fs_type = source.get("fsType") or ""
        mount_flags = list(((pv or {}).get("spec") or {}).get("mountOptions") or [])
        cap = pb.VolumeCapability(
            mount=pb.VolumeCapability.MountVolume(fs_type=fs_type, mount_flags=mount_flags),
            access_mode=pb.VolumeCapability.AccessMode(mode=access))
        attributes = dict(source.get("volumeAttributes") or {})

        staging = ""
        if not ephemeral and NodeRPC.STAGE_UNSTAGE_VOLUME in caps:
            staging = self._stage(driver, handle, cap, attributes,
                                  self._secrets(source.get("nodeStageSecretRef"), ns))

        context = dict(attributes)
        if dspec["podInfoOnMount"]:
            context.update({api.POD_NAME_KEY: meta.get("name", ""), api.POD_NAMESPACE_KEY: ns,
                            api.POD_UID_KEY: uid,
                            api.POD_SA_KEY: (pod.get("spec") or {}).get("serviceAccountName") or "default",
                            api.EPHEMERAL_KEY: "true" if ephemeral else "false"})
        elif ephemeral:
            context[api.EPHEMERAL_KEY] = "true"
        target = vol_dir / "mount"
        readonly = read_only or bool(source.get("readOnly"))
        if mounts.is_mountpoint(str(target)):
            return str(target)
        made_dir = not vol_dir.exists()
        vol_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        write_vol_data(vol_dir, {"driverName": driver, "volumeHandle": handle, "specVolumeID": spec_name,
                                 "nodeName": self.node_name, "volumeLifecycleMode": mode,
                                 "stagingPath": staging})
        req = pb.NodePublishVolumeRequest(volume_id=handle, staging_target_path=staging,
                                          target_path=str(target), volume_capability=cap, readonly=readonly,
                                          volume_context=context,
                                          secrets=self._secrets(source.get("nodePublishSecretRef"), ns))
        try:
            self._call(driver, "NodePublishVolume", req)
        except VolumeSourceError:
            if made_dir:  # nothing of ours left for this volume: the driver cleaned up its target
                shutil.rmtree(vol_dir, ignore_errors=True)
                # nor staged for nobody: a pod deleted now would leave the staging behind (the next
                # attempt stages again)
                if staging and not self._in_use(driver, handle):
                    try:
                        self._unstage(driver, handle, staging)
                    except VolumeSourceError as e:  # the publish error is the one to report
                        log.warning("csi: %s volume %s stays staged at %s: %s", driver, handle, staging, e)
            raise
        self._apply_fs_group(pod, dspec, target, readonly, fs_type, modes)
        log.info("csi: %s volume %s (%s) published for pod %s at %s", driver, spec_name, handle, uid, target)
        return str(target)

    def _stage(self, driver: str, handle: str, cap: pb.VolumeCapability, attributes: Mapping[str, str],
               secrets: Mapping[str, str]) -> str:
        staging = api.staging_path(str(self.root), driver, handle)
        parent = Path(staging).parent
        if mounts.is_mountpoint(staging):
            return staging
        parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        write_vol_data(parent, {"driverName": driver, "volumeHandle": handle})
        req = pb.NodeStageVolumeRequest(volume_id=handle, staging_target_path=staging, volume_capability=cap,
                                        volume_context=attributes, secrets=secrets)
        self._call(driver, "NodeStageVolume", req)
        return staging

    @staticmethod
    def _apply_fs_group(pod: Mapping[str, Any], dspec: Mapping[str, Any], target: Path, read_only: bool,
                        fs_type: str, modes: list[str]) -> None:
        """fsGroupPolicy: File always; ReadWriteOnceWithFSType for an RWO volume with an fsType; None
        never."""
        gid, policy = ownership.fs_group(pod)
        if gid is None:
            return
        p = dspec.get("fsGroupPolicy")
        if p == "File" or (p == "ReadWriteOnceWithFSType" and fs_type and modes == ["ReadWriteOnce"]):
            ownership.set_volume_ownership(target, gid, read_only, policy)

    # -- teardown ---------------------------------------------------------------------------------------

    def volume_dirs(self, pod_dir: Path) -> list[Path]:
        d = pod_dir / "volumes" / PLUGIN_DIR
        return sorted(p for p in d.iterdir() if p.is_dir()) if d.is_dir() else []

    def teardown(self, vol_dir: Path) -> None:
        """Unpublish one pod's volume (from its vol_data.json), then unstage it when no other pod on this
        node still has it. Idempotent; a directory without vol_data.json is only unmounted."""
        data = read_vol_data(vol_dir)
        target = vol_dir / "mount"
        if data is None:
            mounts.unmount(str(target))
            shutil.rmtree(vol_dir, ignore_errors=True)
            return
        driver, handle = data.get("driverName", ""), data.get("volumeHandle", "")
        req = pb.NodeUnpublishVolumeRequest(volume_id=handle, target_path=str(target))
        try:
            self._call(driver, "NodeUnpublishVolume", req)
        except VolumeSourceError:
            if mounts.is_mountpoint(str(target)) or self.drivers.endpoint(driver) is not None:
                raise
            # the driver is gone and nothing is mounted: nothing left to undo on this node
        shutil.rmtree(vol_dir, ignore_errors=True)
        staging = data.get("stagingPath") or ""
        if staging and not self._in_use(driver, handle):
            self._unstage(driver, handle, staging)
        log.info("csi: %s volume %s (%s) unpublished from %s", driver, data.get("specVolumeID"), handle,
                 vol_dir)

    def _unstage(self, driver: str, handle: str, staging: str) -> None:
        req = pb.NodeUnstageVolumeRequest(volume_id=handle, staging_target_path=staging)
        self._call(driver, "NodeUnstageVolume", req)
        shutil.rmtree(Path(staging).parent, ignore_errors=True)

    def _in_use(self, driver: str, handle: str) -> bool:
        """Another pod on this node still has the volume published (the kubelet unstages after the last)."""
        for d in (self.root / "pods").glob(f"*/volumes/{PLUGIN_DIR}/*"):
            data = read_vol_data(d)
            if data and data.get("driverName") == driver and data.get("volumeHandle") == handle:
                return True
        return False

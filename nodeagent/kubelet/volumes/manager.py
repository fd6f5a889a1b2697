"""Pod volumes on disk: `<root>/pods/<uid>/volumes/kubernetes.io~<type>/<name>`.

`VolumeManager.setup_pod(pod)` makes every volume of a pod and returns where each one is on the host
(what the pod worker bind-mounts into containers through CRI); `update_pod` re-projects configMap,
secret, downwardAPI and projected volumes (atomic swaps, no-ops when unchanged); `teardown_pod` unmounts
and removes everything under the pod's directory. Blocking: run from a worker thread.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kernel.syscalls import LINUX, Syscalls
from nodeagent.api import storage
from nodeagent.api.quantity import int_value
from nodeagent.kubelet.resources import pod_resource_config
from nodeagent.kubelet.volumes import claims, ephemeral, ownership, subpath
from nodeagent.kubelet.volumes import mount as mnt
from nodeagent.kubelet.volumes import stats as vstats
from nodeagent.kubelet.volumes.atomic_writer import AtomicWriter, PayloadError
from nodeagent.kubelet.volumes.payloads import (
    DEFAULT_MODE,
    Getter,
    TokenGetter,
    VolumeSourceError,
    configmap_payload,
    downward_api_payload,
    projected_payload,
    secret_payload,
)
from nodeagent.kubelet.volumes.plugins import PluginVolume, VolumePlugin

DEFAULT_ROOT = "/var/lib/kubelet"

log = logging.getLogger("nodeagent.kubelet.volumes")

PLUGIN_DIRS = {"emptyDir": "kubernetes.io~empty-dir", "configMap": "kubernetes.io~configmap",
               "secret": "kubernetes.io~secret", "downwardAPI": "kubernetes.io~downward-api",
               "projected": "kubernetes.io~projected"}
PROJECTED_KINDS = ("configMap", "secret", "downwardAPI", "projected")
KINDS = ("emptyDir", "hostPath", "configMap", "secret", "downwardAPI", "projected", "image",
         "persistentVolumeClaim", "flexVolume", "csi", "ephemeral")
PLUGIN_KINDS = ("flexVolume", "csi")  # the sources a registered VolumePlugin sets up


class VolumeError(Exception):
    """A volume could not be set up; `reason` and `event_message` are the kubelet's event (FailedMount
    `MountVolume.SetUp failed…`, or FailedAttachVolume / FailedMount `MountVolume.MountDevice failed…` for a
    step before it)."""

    def __init__(self, volume: str, message: str, operation: str = "MountVolume.SetUp",
                 reason: str = "FailedMount") -> None:
        super().__init__(message)
        self.volume = volume
        self.message = message
        self.operation = operation
        self.reason = reason

    @classmethod
    def of(cls, volume: str, e: Exception) -> VolumeError:
        """From a plugin's error, keeping the step it names (a flexvolume StepError's operation)."""
        return cls(volume, str(e), getattr(e, "operation", "MountVolume.SetUp"),
                   getattr(e, "reason", "FailedMount"))

    @property
    def event_message(self) -> str:
        return f'{self.operation} failed for volume "{self.volume}" : {self.message}'


@dataclasses.dataclass(frozen=True)
class Volume:
    name: str
    kind: str  # emptyDir, hostPath, configMap, secret, downwardAPI, projected, image, persistentVolumeClaim
    host_path: str
    read_only: bool = False  # configMap/secret/downwardAPI/projected are always mounted read-only
    image: str = ""  # an image volume's reference (the runtime mounts the image itself: no host path)
    pull_policy: str = ""
    image_ref: str = ""  # the runtime's reference to the pulled image (kuberuntime fills it in)
    block: bool = False  # volumeMode Block: host_path is the device node, given to volumeDevices
    plugin: str = ""  # a claim's volume plugin (hostPath, local, flexVolume, csi): how its stats are measured


def volume_kind(volume: Mapping[str, Any]) -> str:
    for k in KINDS:
        if k in volume:
            return k
    other = [k for k in volume if k != "name"]
    raise VolumeError(volume.get("name", "?"), f"volume type {','.join(other) or 'unknown'} is unimplemented")


# -- hostPath -------------------------------------------------------------------------------------------


def check_host_path(path: str, type_: str | None) -> None:
    """checkTypeInternal: create for *OrCreate, else the path must be of the named kind."""
    if not type_:
        return
    def exists() -> bool:
        return os.path.lexists(path)

    def kind() -> int | None:
        try:
            return os.stat(path).st_mode
        except OSError:
            return None

    if type_ == "DirectoryOrCreate":
        if not exists():
            os.makedirs(path, mode=0o755, exist_ok=True)
            return
        type_ = "Directory"
    elif type_ == "FileOrCreate":
        if not exists():
            try:
                fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
            except OSError as e:
                raise VolumeSourceError(f"hostPath type check failed: {path} could not be created: "
                                        f"{e.strerror}") from None
            os.close(fd)
            return
        type_ = "File"
    m = kind()
    checks = {"Directory": (stat.S_ISDIR, "is not a directory"), "File": (stat.S_ISREG, "is not a file"),
              "Socket": (stat.S_ISSOCK, "is not a socket file"),
              "CharDevice": (stat.S_ISCHR, "is not a character device"),
              "BlockDevice": (stat.S_ISBLK, "is not a block device")}
    if type_ not in checks:
        raise VolumeSourceError(f"{type_} is an invalid volume type")
    test, what = checks[type_]
    if m is None or not test(m):
        raise VolumeSourceError(f"hostPath type check failed: {path} {what}")


# -- emptyDir -------------------------------------------------------------------------------------------


def empty_dir_memory_size(pod: Mapping[str, Any], source: Mapping[str, Any],
                          node_allocatable_memory: int | None) -> int | None:
    """calculateEmptyDirMemorySize: node allocatable, lowered to the pod's memory limit, lowered to
    sizeLimit."""
    size = node_allocatable_memory
    pod_limit = pod_resource_config(pod, enforce_cpu_limits=False).memory_limit
    if pod_limit and pod_limit > 0 and (size is None or pod_limit <= size):
        size = pod_limit
    if source.get("sizeLimit") is not None:
        limit = int_value(source["sizeLimit"])
        if limit > 0 and (size is None or limit <= size):
            size = limit
    return size


# -- the manager ----------------------------------------------------------------------------------------


class VolumeManager:
    def __init__(self, root: str | os.PathLike = DEFAULT_ROOT, get_configmap: Getter | None = None,
                 get_secret: Getter | None = None, get_token: TokenGetter | None = None,
                 node_allocatable: Mapping[str, Any] | None = None,
                 now: Callable[[], float] | None = None, secrets_in_memory: bool = True,
                 get_claim: Getter | None = None, get_volume: Getter | None = None,
                 plugins: Mapping[str, VolumePlugin] | None = None, sc: Syscalls = LINUX) -> None:
        """secrets_in_memory: secret and projected volumes sit on their own tmpfs, as the kubelet keeps
        them (its wrapped emptyDir with medium Memory), so secret data never reaches the node's disk."""
        self.root = Path(root)
        self.secrets_in_memory = secrets_in_memory
        self.get_configmap = get_configmap
        self.get_secret = get_secret
        self.get_token = get_token
        self.get_claim = get_claim  # (namespace, name) → PersistentVolumeClaim
        self.get_volume = get_volume  # ("", name) → PersistentVolume
        self.node_allocatable = dict(node_allocatable or {})
        self.now = now
        # source key (flexVolume, csi) → the plugin that sets such volumes up; a kind without one is refused
        self.plugins: dict[str, VolumePlugin] = dict(plugins or {})
        self.sc = sc  # the kernel's syscalls (a recording fake in unit tests), for subPath binds
        # The actual state of the world: pod uid → its volumes as set up (rebuilt from the pod and the disk
        # at the pod's first sync after a restart, as the kubelet's reconstruction does).
        self.actual: dict[str, dict[str, Volume]] = {}

    # layout
    def pods_dir(self) -> Path:
        return self.root / "pods"

    def pod_dir(self, uid: str) -> Path:
        if not uid or "/" in uid or uid in (".", ".."):
            raise ValueError(f"invalid pod uid {uid!r}")
        return self.pods_dir() / uid

    def volume_dir(self, uid: str, kind: str, name: str) -> Path:
        return self.pod_dir(uid) / "volumes" / PLUGIN_DIRS[kind] / name

    # setup
    def setup_pod(self, pod: Mapping[str, Any]) -> dict[str, Volume]:
        """Every volume of the pod, ready to bind-mount. Raises VolumeError naming the first that failed.
        What is set up is the pod's actual state (its stats are read from it)."""
        out = {}
        for v in (pod.get("spec") or {}).get("volumes") or []:
            out[v["name"]] = self.setup_volume(pod, v)
        self.actual[(pod.get("metadata") or {}).get("uid", "")] = out
        return out

    def volume_stats(self, pod: Mapping[str, Any]) -> list[tuple[str, vstats.Stats, tuple[str, str] | None]]:
        """(volume name, stats, (namespace, claim) for a claim's volume) of each mounted volume that the
        kubelet measures (hostPath and image volumes are not; a flex driver must say supportsMetrics)."""
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        claims_of = {v["name"]: (v["persistentVolumeClaim"] or {}).get("claimName", "")
                     for v in (pod.get("spec") or {}).get("volumes") or [] if "persistentVolumeClaim" in v}
        out = []
        for name, v in sorted((self.actual.get(meta.get("uid", "")) or {}).items()):
            plugin = v.plugin or v.kind
            owner = self.plugins.get(plugin)
            if owner is not None and not owner.supports_metrics(Path(v.host_path)):
                continue
            try:
                st = vstats.measure(plugin, v.host_path, block_device=v.block,
                                    own_fs=plugin != "emptyDir" and mnt.is_mountpoint(v.host_path))
            except OSError:
                continue  # gone while measuring (the pod is being torn down)
            if st is not None:
                out.append((name, st, (ns, claims_of[name]) if name in claims_of else None))
        return out

    def setup_volume(self, pod: Mapping[str, Any], volume: Mapping[str, Any]) -> Volume:
        name = volume["name"]
        kind = volume_kind(volume)
        uid = (pod.get("metadata") or {}).get("uid", "")
        try:
            if kind == "image":  # pulled and mounted by the runtime when a container starts (KEP-4639)
                src = volume["image"] or {}
                return Volume(name, kind, "", read_only=True, image=src.get("reference", ""),
                              pull_policy=src.get("pullPolicy", ""))
            if kind == "hostPath":
                hp = volume["hostPath"]
                check_host_path(hp["path"], hp.get("type"))
                return Volume(name, kind, hp["path"])
            if kind == "persistentVolumeClaim":
                return self._setup_claim(pod, volume)
            if kind in PLUGIN_KINDS:
                src = volume[kind] or {}
                ns = (pod.get("metadata") or {}).get("namespace") or "default"
                spec = PluginVolume(kind, src, name, bool(src.get("readOnly")), ns)
                return Volume(name, kind, str(self._setup_plugin(pod, spec)), read_only=spec.read_only)
            if kind == "ephemeral":  # a generic ephemeral volume: the claim the ephemeral controller made
                claim = {"claimName": ephemeral.claim_name(pod, volume), "readOnly": False}
                return self._setup_claim(pod, {"name": name, "persistentVolumeClaim": claim}, owned=True)
            path = self.volume_dir(uid, kind, name)
            fresh = not path.exists()
            if kind == "emptyDir":
                self._setup_empty_dir(pod, volume["emptyDir"] or {}, path)
                if fresh:
                    self._own(pod, path, read_only=False)
                return Volume(name, kind, str(path))
            if self._project(pod, volume, kind, path) or fresh:
                self._own(pod, path, read_only=True)
            return Volume(name, kind, str(path), read_only=True)
        except VolumeError:
            raise
        except (VolumeSourceError, PayloadError) as e:
            raise VolumeError.of(name, e) from None
        except OSError as e:
            raise VolumeError(name, f"{e.strerror or e}: {e.filename or ''}".rstrip(": ")) from None

    def _setup_claim(self, pod: Mapping[str, Any], volume: Mapping[str, Any], owned: bool = False) -> Volume:
        """owned: the claim must be the pod's own (a generic ephemeral volume's)."""
        src = volume["persistentVolumeClaim"] or {}
        ns = (pod.get("metadata") or {}).get("namespace") or "default"
        pvc = self.get_claim(ns, src.get("claimName", "")) if self.get_claim else None
        if owned and pvc is not None:
            ephemeral.check_owner(pod, pvc)
        vname = ((pvc or {}).get("spec") or {}).get("volumeName") or ""
        pv = self.get_volume("", vname) if self.get_volume and vname else None
        plugin, source = claims.resolve(pod, src, pvc, pv)
        read_only = bool(src.get("readOnly"))
        mismatch = claims.mode_mismatch(pod, volume["name"], storage.volume_mode(pv or {}))
        if mismatch:
            raise VolumeSourceError(mismatch)
        if storage.volume_mode(pv or {}) == "Block":
            return self._map_block(pod, volume["name"], vname, source.get("path", ""), read_only)
        if plugin in PLUGIN_KINDS:
            spec = PluginVolume(plugin, source, vname, read_only, ns, pv)
            return Volume(volume["name"], "persistentVolumeClaim", str(self._setup_plugin(pod, spec)),
                          read_only=read_only, plugin=plugin)
        if plugin == "hostPath":
            check_host_path(source.get("path", ""), source.get("type"))
            return Volume(volume["name"], "persistentVolumeClaim", source["path"], read_only=read_only,
                          plugin=plugin)
        # local: the volume's path bind-mounted under the pod, named after the PV
        uid = (pod.get("metadata") or {}).get("uid", "")
        target = self.pod_dir(uid) / "volumes" / claims.LOCAL_PLUGIN_DIR / vname
        if not os.path.isdir(source.get("path", "")):
            raise VolumeSourceError(f'local volume "{vname}": path "{source.get("path")}" does not exist '
                                    "or is not a directory")
        target.mkdir(parents=True, exist_ok=True, mode=0o750)
        if not mnt.is_mountpoint(target):
            mnt.mount_bind(source["path"], target)
            if not read_only:  # the local plugin owns the volume for fsGroup at its first mount
                self._own(pod, target, read_only=False)
        return Volume(volume["name"], "persistentVolumeClaim", str(target), read_only=read_only,
                      plugin=plugin)

    def _map_block(self, pod: Mapping[str, Any], name: str, pv_name: str, device: str,
                   read_only: bool) -> Volume:
        """A local Block volume: the device itself goes to the containers' volumeDevices (the runtime
        makes the node and allows it in the device cgroup); the pod's volumeDevices dir links to it, as
        the kubelet's block mapper records the mapping."""
        try:
            is_block = stat.S_ISBLK(os.stat(device).st_mode)
        except OSError as e:
            raise VolumeSourceError(f'local volume "{pv_name}": {device}: {e.strerror}') from None
        if not is_block:
            raise VolumeSourceError(f'local volume "{pv_name}": {device} is not a block device, as '
                                    "volumeMode Block requires")
        uid = (pod.get("metadata") or {}).get("uid", "")
        link = self.pod_dir(uid) / "volumeDevices" / claims.LOCAL_PLUGIN_DIR / pv_name
        link.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        if os.path.lexists(link) and os.readlink(link) != device:
            link.unlink()
        if not os.path.lexists(link):
            link.symlink_to(device)
        return Volume(name, "persistentVolumeClaim", device, read_only=read_only, block=True, plugin="local")

    def bind_sub_path(self, uid: str, volume_path: str, sub: str, volume: str, container: str,
                      index: int) -> str:
        """The safe bind of a container's subPath under the pod's volume-subpaths/ (see subpath)."""
        return subpath.bind(self.pod_dir(uid), volume_path, sub, volume, container, index, self.sc)

    def _setup_plugin(self, pod: Mapping[str, Any], spec: PluginVolume) -> Path:
        """A plugin's volume at <pod>/volumes/<its dir>/<name>, mounted by the plugin."""
        plugin = self.plugins.get(spec.kind)
        if plugin is None:
            why = " (no --volume-plugin-dir)" if spec.kind == "flexVolume" else ""
            raise VolumeSourceError(f"volume type {spec.kind} is unimplemented on this kubelet{why}")
        uid = (pod.get("metadata") or {}).get("uid", "")
        target = self.pod_dir(uid) / "volumes" / plugin.dir_name(spec) / spec.name
        return plugin.setup(pod, spec, target) or target

    def _setup_empty_dir(self, pod: Mapping[str, Any], source: Mapping[str, Any], path: Path) -> None:
        medium = source.get("medium", "")
        if medium not in ("", "Memory"):
            raise VolumeSourceError(f"emptyDir medium {medium} is unimplemented")
        path.mkdir(parents=True, exist_ok=True, mode=0o750)
        if medium == "Memory":
            if not mnt.is_mountpoint(path):
                size = empty_dir_memory_size(pod, source, self._allocatable_memory())
                mnt.mount_tmpfs(path, size, 0o777)
        # Every emptyDir is world-writable, as kubelet makes them (keeping fsGroup's setgid bit).
        os.chmod(path, 0o777 | (os.stat(path).st_mode & stat.S_ISGID))

    @staticmethod
    def _own(pod: Mapping[str, Any], path: Path, read_only: bool) -> None:
        """fsGroup ownership, when the volume is set up and after each projection change (the kubelet's
        SetVolumeOwnership at mount and as the atomic writer's setPerms)."""
        gid, policy = ownership.fs_group(pod)
        if gid is not None:
            ownership.set_volume_ownership(path, gid, read_only, policy)

    def _allocatable_memory(self) -> int | None:
        v = self.node_allocatable.get("memory")
        return int_value(v) if v is not None else None

    def _project(self, pod: Mapping[str, Any], volume: Mapping[str, Any], kind: str, path: Path) -> bool:
        ns = (pod.get("metadata") or {}).get("namespace", "default")
        src = volume[kind] or {}
        if kind == "configMap":
            obj = self.get_configmap(ns, src["name"]) if self.get_configmap else None
            payload = configmap_payload(src, obj)
        elif kind == "secret":
            obj = self.get_secret(ns, src["secretName"]) if self.get_secret else None
            payload = secret_payload(src, obj)
        elif kind == "downwardAPI":
            payload = downward_api_payload(src.get("items") or [], pod,
                                           int(src.get("defaultMode", DEFAULT_MODE)), self.node_allocatable)
        else:
            payload = projected_payload(src, pod, self.get_configmap, self.get_secret, self.get_token,
                                        self.node_allocatable)
        path.mkdir(parents=True, exist_ok=True, mode=0o755)
        if self.secrets_in_memory and kind in ("secret", "projected") and not mnt.is_mountpoint(path):
            mnt.mount_tmpfs(path, empty_dir_memory_size(pod, {}, self._allocatable_memory()), 0o755)
        return AtomicWriter(path, self.now).write(payload)

    def update_pod(self, pod: Mapping[str, Any]) -> list[str]:
        """Re-project the pod's configMap/secret/downwardAPI/projected volumes; returns the names that
        changed."""
        changed = []
        uid = (pod.get("metadata") or {}).get("uid", "")
        if uid not in self.actual:  # first sync since a restart: reconstruct (mounting what is missing)
            self._reconstruct(pod)
        for v in (pod.get("spec") or {}).get("volumes") or []:
            kind = volume_kind(v)
            if kind not in PROJECTED_KINDS:
                continue
            try:
                path = self.volume_dir(uid, kind, v["name"])
                if self._project(pod, v, kind, path):
                    self._own(pod, path, read_only=True)
                    changed.append(v["name"])
            except (VolumeSourceError, PayloadError) as e:
                raise VolumeError(v["name"], str(e)) from None
        return changed

    def _reconstruct(self, pod: Mapping[str, Any]) -> None:
        """A running pod's volumes after a restart, each set up again where it is not (idempotent). One
        that cannot be (say its claim is being deleted) stays as it is on disk and unmeasured, as the
        kubelet keeps a running pod's mounted volumes whatever their claim does now."""
        meta = pod.get("metadata") or {}
        rebuilt = {}
        for v in (pod.get("spec") or {}).get("volumes") or []:
            try:
                rebuilt[v["name"]] = self.setup_volume(pod, v)
            except VolumeError as e:
                log.warning("pod %s/%s: volume %s not reconstructed (left as mounted): %s",
                            meta.get("namespace"), meta.get("name"), v["name"], e.message)
        self.actual[meta.get("uid", "")] = rebuilt

    # teardown
    def teardown_pod(self, uid: str) -> None:
        """Unmount whatever is mounted below the pod's directory, then remove it. Idempotent."""
        pod_dir = self.pod_dir(uid)
        self.unmount_volumes(uid)
        if not pod_dir.exists():
            return
        for mp in mnt.mounts_under(pod_dir):
            mnt.unmount(mp)
        left = mnt.mounts_under(pod_dir)
        if left:
            raise OSError(f"still mounted under {pod_dir}: {left}")
        shutil.rmtree(pod_dir)

    def unmount_volumes(self, uid: str) -> bool:
        """Tear down the pod's volumes (a terminated pod's, as the kubelet does once its containers are
        gone; the pod's other files stay until it is deleted). Works from what is on disk, as the kubelet's
        reconstruction does, so it works after a restart too. Returns whether there was anything."""
        self.actual.pop(uid, None)
        pod_dir = self.pod_dir(uid)
        dirs = [pod_dir / d for d in (subpath.SUBPATH_DIR, "volumes", "volumeDevices")]
        if not any(d.exists() for d in dirs):
            return False
        subpath.clean(pod_dir, self.sc)  # the containers' subPath binds go before the volumes they bind from
        # Volumes whose plugin unmounts them (FlexVolume drivers' <vendor>~<driver>, CSI's dirs).
        volumes = pod_dir / "volumes"
        for plugin_dir in sorted(volumes.iterdir()) if volumes.is_dir() else []:
            owner = next((p for p in self.plugins.values() if p.owns(plugin_dir.name)), None)
            if owner is None or not plugin_dir.is_dir():
                continue
            for vol in sorted(plugin_dir.iterdir()):
                owner.teardown(vol)
        for mp in mnt.mounts_under(volumes) if volumes.exists() else []:
            mnt.unmount(mp)
        if volumes.exists() and mnt.mounts_under(volumes):
            raise OSError(f"still mounted under {volumes}: {mnt.mounts_under(volumes)}")
        for d in dirs:
            if d.exists():
                shutil.rmtree(d)
        return True

    def remove_orphaned_pod_dir(self, uid: str) -> str | None:
        """kubelet's cleanupOrphanedPodDirs for a pod directory no source, worker or runtime pod accounts
        for: its volumes torn down first from what is on disk (`unmount_volumes`: the volume manager's
        reconstruction and unmount, which leaves a volume it cannot unmount mounted), then the directory
        removed only once no volume is left, never through a mount point below it. None once it is gone,
        else why it stays (looked at again at the next housekeeping)."""
        pod_dir = self.pod_dir(uid)
        if not pod_dir.is_dir():
            return None
        try:
            self.unmount_volumes(uid)
        except OSError as e:  # kubelet's podVolumesExist: a volume still mounted on disk
            return f"volumes are not cleaned up: {e}"
        kept = []  # as kubelet's, every other subdir is tried; the pod dir goes if they all went
        for sub in sorted(pod_dir.iterdir()):
            if sub.name == "volumes":  # unmount_volumes removes it once nothing is mounted below
                kept.append("volumes subdir was found after it was removed")
                continue
            try:
                mnt.remove_all_one_mount(sub)
            except OSError as e:
                kept.append(f"cannot remove {sub.name}: {e.strerror or e}")
        if kept:
            return "; ".join(kept)
        pod_dir.rmdir()
        return None

    def pod_uids_on_disk(self) -> list[str]:
        """Pods that still have a directory (orphans to clean after a restart)."""
        d = self.pods_dir()
        return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.exists() else []

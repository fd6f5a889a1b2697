"""The hostpath driver's Controller and Node services, on plain values (blocking: run on a worker thread).

A volume is a directory `<root>/volumes/<id>` on this node; a snapshot is a gzip'd tar of one
(`<root>/snapshots/<id>.tar.gz`), restored by CreateVolume from it; a clone is a copy. NodeStageVolume
binds the volume's directory at the staging path (the kubelet's `…/globalmount`), NodePublishVolume binds
the staging path (or the directory, for an unstaged ephemeral volume) at the target path with the
capability's mount flags and `readonly`. Every RPC checks its arguments in the spec's order, is idempotent,
and answers the spec's codes (`CSIError`). Capacity is accounted, not enforced: a directory has no size
(as csi-driver-host-path's directory volumes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tarfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

from csi.driver.errors import CSIError, invalid, not_found, require
from csi.driver.state import Snapshot, State, Volume
from kernel import mounts
from kernel.fs import publish, temp_path

TOPOLOGY_KEY = "topology.hostpath.csi/node"
EPHEMERAL_KEY = "csi.storage.k8s.io/ephemeral"
DEFAULT_MAX_VOLUME_SIZE = 1 << 40  # csi-driver-host-path's default --max-volume-size (1 TiB)
MAX_NAME = 128  # the spec's limit on names and ids the CO sends
SINGLE_NODE_MODES = ("SINGLE_NODE_WRITER", "SINGLE_NODE_READER_ONLY", "SINGLE_NODE_SINGLE_WRITER",
                     "SINGLE_NODE_MULTI_WRITER")
# A directory on one node serves pods on that node only; reading it from many is fine (MULTI_NODE_READER_ONLY
# is what csi-driver-host-path also accepts), writing from several nodes is not.
SUPPORTED_MODES = (*SINGLE_NODE_MODES, "MULTI_NODE_READER_ONLY")


@dataclasses.dataclass(frozen=True)
class Capability:
    """A VolumeCapability: access type (mount | block | ""), access mode's name, fs type, mount flags."""

    access_type: str
    access_mode: str
    fs_type: str = ""
    mount_flags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Config:
    name: str  # the driver's name (GetPluginInfo), e.g. hostpath.csi.nodeagent.io
    node_id: str
    root: str  # state, volume directories, snapshots
    max_volumes_per_node: int = 0  # NodeGetInfo's limit (0: none); the kubelet puts it in CSINode
    # bytes this driver may hand out in all (0: not accounted; GetCapacity reports the free space of root's
    # filesystem, which a directory volume shares)
    capacity: int = 0
    max_volume_size: int = 0  # bytes (0: the capacity, else 1 TiB)


@dataclasses.dataclass(frozen=True)
class Stats:
    total: int
    available: int
    used: int
    inodes: int
    inodes_free: int
    inodes_used: int


def check_capabilities(caps: Sequence[Capability]) -> str:
    """"" when the driver can serve every capability, else why not (ValidateVolumeCapabilities' message,
    CreateVolume's INVALID_ARGUMENT)."""
    for c in caps:
        if c.access_type == "block":
            return "block access type is not supported: volumes are directories"
        if c.access_type != "mount":
            return "a volume capability needs an access type (mount or block)"
        if c.access_mode not in SUPPORTED_MODES:
            return f"access mode {c.access_mode} is not supported: a hostpath volume lives on one node"
        try:
            mounts.bind_flags(c.mount_flags)
        except ValueError as e:
            return str(e)
    return ""


def requested_capacity(required: int, limit: int, maximum: int) -> int:
    """CreateVolume's capacity_range → the size to record (the spec's rules on required/limit bytes)."""
    if required < 0 or limit < 0:
        raise invalid("capacity_range: required_bytes and limit_bytes must not be negative")
    if limit and required > limit:
        raise invalid(f"capacity_range: required_bytes {required} exceeds limit_bytes {limit}")
    if maximum and required > maximum:
        raise CSIError("OUT_OF_RANGE", f"requested capacity {required} exceeds the maximum volume size "
                                       f"{maximum}")
    return required


TOKEN_PREFIX = "after:"


def paginate(ids: list[str], starting_token: str, max_entries: int) -> tuple[list[str], str]:
    """A page of sorted ids and the next token: "after:<the page's last id>", so a token stays good when
    volumes are added or deleted between pages (sanity's pagination spec). ABORTED for a token this driver
    did not hand out."""
    if max_entries < 0:
        raise invalid("max_entries must not be negative")
    ids = sorted(ids)
    if starting_token:
        if not starting_token.startswith(TOKEN_PREFIX):
            raise CSIError("ABORTED", f"starting_token {starting_token!r} was not handed out by this driver")
        after = starting_token.removeprefix(TOKEN_PREFIX)
        ids = [i for i in ids if i > after]
    if not max_entries or len(ids) <= max_entries:
        return ids, ""
    page = ids[:max_entries]
    return page, TOKEN_PREFIX + page[-1]


class HostPath:
    def __init__(self, config: Config, state: State | None = None,
                 now: Callable[[], float] = time.time) -> None:
        self.config = config
        self.state = state or State(config.root)
        self.now = now
        self._reconcile()

    def _reconcile(self) -> None:
        """Records of stagings and publications whose mounts are gone (a node reset, a reboot) are dropped
        before serving, so the records say what the kernel has."""
        changed = False
        for vol in list(self.state.volumes.values()):
            staged = [p for p in vol.staged if mounts.is_mountpoint(p)]
            published = {t: v for t, v in vol.published.items() if mounts.is_mountpoint(t)}
            if staged != vol.staged or published != vol.published:
                vol.staged, vol.published, changed = staged, published, True
            if vol.ephemeral and not vol.published:
                self._drop_ephemeral(vol)
                changed = True
        if changed:
            self.state.save()

    # -- identity ---------------------------------------------------------------------------------------

    @property
    def topology(self) -> dict[str, str]:
        return {TOPOLOGY_KEY: self.config.node_id}

    def probe(self) -> bool:
        return os.access(self.state.volumes_dir, os.W_OK)

    # -- capacity ---------------------------------------------------------------------------------------

    def _allocated(self) -> int:
        return sum(v.capacity for v in self.state.volumes.values())

    def available_capacity(self) -> int:
        if self.config.capacity:
            return max(0, self.config.capacity - self._allocated())
        st = os.statvfs(self.state.volumes_dir)
        return st.f_bavail * st.f_frsize

    def max_volume_size(self) -> int:
        return self.config.max_volume_size or self.config.capacity or DEFAULT_MAX_VOLUME_SIZE

    def _check_room(self, grow: int) -> None:
        """With a configured capacity, RESOURCE_EXHAUSTED when `grow` more bytes do not fit."""
        if self.config.capacity and grow > self.available_capacity():
            raise CSIError("RESOURCE_EXHAUSTED", f"not enough capacity left for {grow} more bytes (capacity "
                                                 f"{self.config.capacity})")

    def _serves(self, topologies: Iterable[Mapping[str, str]]) -> bool:
        """This node is one of the topologies (each a set of segments; an empty list: any)."""
        tops = list(topologies)
        return not tops or any(all(self.topology.get(k) == v for k, v in t.items()) for t in tops)

    def get_capacity(self, topology: Mapping[str, str] | None) -> tuple[int, int]:
        """(available, maximum volume size) in bytes; nothing outside this node's topology."""
        with self.state.lock:
            if topology and not self._serves([topology]):
                return 0, 0
            return self.available_capacity(), self.max_volume_size()

    # -- controller: volumes ----------------------------------------------------------------------------

    def create_volume(self, name: str, caps: Sequence[Capability], required: int = 0, limit: int = 0,
                      parameters: Mapping[str, str] | None = None, snapshot_id: str = "",
                      source_volume_id: str = "", requisite: Sequence[Mapping[str, str]] = (),
                      ) -> Volume:
        require(name, "name")
        if len(name) > MAX_NAME:
            raise invalid(f"name is longer than {MAX_NAME} bytes")
        require(caps, "volume_capabilities")
        why = check_capabilities(caps)
        if why:
            raise invalid(why)
        with self.state.lock:
            size = requested_capacity(required, limit, self.max_volume_size())
            existing = self.state.volume_by_name(name)
            if existing is not None:
                if existing.capacity < required or (limit and existing.capacity > limit):
                    raise CSIError("ALREADY_EXISTS", f"volume {name!r} exists with capacity "
                                                     f"{existing.capacity}, not {required}")
                if (existing.source_snapshot, existing.source_volume) != (snapshot_id, source_volume_id):
                    raise CSIError("ALREADY_EXISTS", f"volume {name!r} exists from another content source")
                return existing
            if not self._serves(requisite):
                raise CSIError("RESOURCE_EXHAUSTED", f"this driver serves only {self.topology}, not the "
                                                     f"requisite topologies {list(requisite)}")
            self._check_room(size)
            fill = self._content_filler(snapshot_id, source_volume_id, size)
            vol = Volume(id=str(uuid.uuid4()), name=name, capacity=size, source_snapshot=snapshot_id,
                         source_volume=source_volume_id, parameters=dict(parameters or {}))
            path = self.state.volume_path(vol.id)
            try:
                os.mkdir(path, 0o777)
                os.chmod(path, 0o777)  # as csi-driver-host-path: any pod user may write
                fill(path)
                self.state.volumes[vol.id] = vol
                self.state.save()
            except BaseException:
                self.state.volumes.pop(vol.id, None)
                shutil.rmtree(path, ignore_errors=True)
                raise
            return vol

    def _content_filler(self, snapshot_id: str, volume_id: str, size: int) -> Callable[[str], None]:
        """What fills a new volume's directory, checked before anything is made."""
        if snapshot_id:
            snap = self.state.snapshots.get(snapshot_id)
            if snap is None:
                raise not_found(f"source snapshot {snapshot_id} does not exist")
            if size and size < snap.size:
                raise CSIError("OUT_OF_RANGE", f"requested capacity {size} is smaller than snapshot "
                                               f"{snapshot_id}'s size {snap.size}")
            archive = self.state.snapshot_path(snapshot_id)
            return lambda path: _untar(archive, path)
        if volume_id:
            src = self.state.volumes.get(volume_id)
            if src is None:
                raise not_found(f"source volume {volume_id} does not exist")
            if size and size < src.capacity:
                raise CSIError("OUT_OF_RANGE", f"requested capacity {size} is smaller than volume "
                                               f"{volume_id}'s size {src.capacity}")
            source = self.state.volume_path(volume_id)
            return lambda path: _copy(source, path)
        return lambda path: None

    def delete_volume(self, volume_id: str) -> None:
        require(volume_id, "volume_id")
        with self.state.lock:
            vol = self.state.volumes.get(volume_id)
            if vol is None:
                return  # already gone: success
            if vol.staged or vol.published:
                raise CSIError("FAILED_PRECONDITION", f"volume {volume_id} is still staged or published "
                                                      f"at {[*vol.staged, *vol.published]}")
            shutil.rmtree(self.state.volume_path(volume_id), ignore_errors=True)
            del self.state.volumes[volume_id]
            self.state.save()

    def validate_capabilities(self, volume_id: str, caps: Sequence[Capability]) -> str:
        """"" when confirmed, else why not; NOT_FOUND for an unknown volume."""
        require(volume_id, "volume_id")
        require(caps, "volume_capabilities")
        with self.state.lock:
            if volume_id not in self.state.volumes:
                raise not_found(f"volume {volume_id} does not exist")
        return check_capabilities(caps)

    def list_volumes(self, starting_token: str, max_entries: int) -> tuple[list[Volume], str]:
        with self.state.lock:
            ids = sorted(i for i, v in self.state.volumes.items() if not v.ephemeral)
            page, token = paginate(ids, starting_token, max_entries)
            return [self.state.volumes[i] for i in page], token

    def expand_volume(self, volume_id: str, required: int, limit: int) -> int:
        """ControllerExpandVolume and NodeExpandVolume's record: the new capacity (never shrinks)."""
        with self.state.lock:
            vol = self.state.volumes.get(volume_id)
            if vol is None:
                raise not_found(f"volume {volume_id} does not exist")
            size = requested_capacity(required, limit, self.max_volume_size())
            if size > vol.capacity:
                self._check_room(size - vol.capacity)
                vol.capacity = size
                self.state.save()
            return vol.capacity

    # -- controller: snapshots --------------------------------------------------------------------------

    def create_snapshot(self, name: str, source_volume_id: str) -> Snapshot:
        require(name, "name")
        require(source_volume_id, "source_volume_id")
        if len(name) > MAX_NAME:
            raise invalid(f"name is longer than {MAX_NAME} bytes")
        with self.state.lock:
            existing = self.state.snapshot_by_name(name)
            if existing is not None:
                if existing.source_volume != source_volume_id:
                    raise CSIError("ALREADY_EXISTS", f"snapshot {name!r} exists for volume "
                                                     f"{existing.source_volume}")
                return existing
            vol = self.state.volumes.get(source_volume_id)
            if vol is None:
                raise not_found(f"source volume {source_volume_id} does not exist")
            snap = Snapshot(id=str(uuid.uuid4()), name=name, source_volume=source_volume_id,
                            size=vol.capacity, created=self.now())
            archive = self.state.snapshot_path(snap.id)
            try:
                _tar(self.state.volume_path(source_volume_id), archive)
                self.state.snapshots[snap.id] = snap
                self.state.save()
            except BaseException:
                self.state.snapshots.pop(snap.id, None)
                with _gone():
                    os.unlink(archive)
                raise
            return snap

    def delete_snapshot(self, snapshot_id: str) -> None:
        require(snapshot_id, "snapshot_id")
        with self.state.lock:
            if self.state.snapshots.pop(snapshot_id, None) is None:
                return
            with _gone():
                os.unlink(self.state.snapshot_path(snapshot_id))
            self.state.save()

    def list_snapshots(self, snapshot_id: str, source_volume_id: str, starting_token: str,
                       max_entries: int) -> tuple[list[Snapshot], str]:
        with self.state.lock:
            snaps = [s for s in self.state.snapshots.values()
                     if (not snapshot_id or s.id == snapshot_id)
                     and (not source_volume_id or s.source_volume == source_volume_id)]
            by_id = {s.id: s for s in snaps}
            page, token = paginate(sorted(by_id), starting_token, max_entries)
            return [by_id[i] for i in page], token

    # -- node -------------------------------------------------------------------------------------------

    def _volume(self, volume_id: str) -> Volume:
        vol = self.state.volumes.get(volume_id)
        if vol is None:
            raise not_found(f"volume {volume_id} does not exist")
        return vol

    def node_stage(self, volume_id: str, staging_path: str, cap: Capability | None) -> None:
        require(volume_id, "volume_id")
        require(staging_path, "staging_target_path")
        require(cap, "volume_capability")
        assert cap is not None
        why = check_capabilities([cap])
        if why:
            raise invalid(why)
        with self.state.lock:
            vol = self._volume(volume_id)
            if staging_path in vol.staged and mounts.is_mountpoint(staging_path):
                return
            os.makedirs(staging_path, mode=0o750, exist_ok=True)
            if not mounts.is_mountpoint(staging_path):
                mounts.bind(self.state.volume_path(volume_id), staging_path)
            try:
                if staging_path not in vol.staged:
                    vol.staged.append(staging_path)
                self.state.save()
            except BaseException:
                mounts.unmount(staging_path)
                raise

    def node_unstage(self, volume_id: str, staging_path: str) -> None:
        require(volume_id, "volume_id")
        require(staging_path, "staging_target_path")
        with self.state.lock:
            vol = self.state.volumes.get(volume_id)
            if vol is None and not mounts.is_mountpoint(staging_path):
                raise not_found(f"volume {volume_id} does not exist")
            mounts.unmount(staging_path)
            if vol is not None and staging_path in vol.staged:
                vol.staged.remove(staging_path)
                self.state.save()

    def node_publish(self, volume_id: str, target: str, cap: Capability | None, staging_path: str = "",
                     readonly: bool = False, context: Mapping[str, str] | None = None) -> None:
        require(volume_id, "volume_id")
        require(target, "target_path")
        require(cap, "volume_capability")
        assert cap is not None
        why = check_capabilities([cap])
        if why:
            raise invalid(why)
        ephemeral = (context or {}).get(EPHEMERAL_KEY) == "true"
        flags = mounts.bind_flags(cap.mount_flags)
        if readonly or cap.access_mode in ("SINGLE_NODE_READER_ONLY", "MULTI_NODE_READER_ONLY"):
            flags |= mounts.BIND_FLAGS["ro"]
        with self.state.lock:
            made = None
            if ephemeral and volume_id not in self.state.volumes:
                made = self._make_ephemeral(volume_id, context or {})
            vol = self._volume(volume_id)
            if target in vol.published and mounts.is_mountpoint(target):
                if vol.published[target].get("readonly") != bool(flags & mounts.BIND_FLAGS["ro"]):
                    raise CSIError("ALREADY_EXISTS", f"volume {volume_id} is published at {target} with "
                                                     "another readonly setting")
                return
            if cap.access_mode == "SINGLE_NODE_SINGLE_WRITER" and any(t != target for t in vol.published):
                raise CSIError("FAILED_PRECONDITION", f"volume {volume_id} (SINGLE_NODE_SINGLE_WRITER) is "
                                                      f"already published at {next(iter(vol.published))}")
            if staging_path:
                if staging_path not in vol.staged:
                    raise CSIError("FAILED_PRECONDITION", f"volume {volume_id} is not staged at "
                                                          f"{staging_path}")
                source = staging_path
            elif vol.ephemeral:
                source = self.state.volume_path(volume_id)
            else:
                raise CSIError("FAILED_PRECONDITION", f"volume {volume_id}: staging_target_path is required "
                                                      "(this driver has STAGE_UNSTAGE_VOLUME)")
            created_target = not os.path.exists(target)
            try:
                os.makedirs(target, mode=0o750, exist_ok=True)
                if not mounts.is_mountpoint(target):
                    mounts.bind(source, target, flags)
                vol.published[target] = {"readonly": bool(flags & mounts.BIND_FLAGS["ro"]),
                                         "access_mode": cap.access_mode}
                self.state.save()
            except BaseException:
                vol.published.pop(target, None)
                mounts.unmount(target)
                if created_target:
                    with _gone():
                        os.rmdir(target)
                if made is not None:
                    self._drop_ephemeral(made)
                raise

    def node_unpublish(self, volume_id: str, target: str) -> None:
        require(volume_id, "volume_id")
        require(target, "target_path")
        with self.state.lock:
            vol = self.state.volumes.get(volume_id)
            if vol is None and not os.path.lexists(target):
                raise not_found(f"volume {volume_id} does not exist")
            mounts.unmount(target)
            with _gone():
                os.rmdir(target)  # the spec: the SP removes the target it made
            if vol is None:
                return
            vol.published.pop(target, None)
            if vol.ephemeral and not vol.published:
                self._drop_ephemeral(vol)
            self.state.save()

    def _make_ephemeral(self, volume_id: str, context: Mapping[str, str]) -> Volume:
        if len(volume_id) > MAX_NAME or "/" in volume_id or volume_id in (".", ".."):
            raise invalid(f"volume_id {volume_id!r} is not usable as an ephemeral volume's name")
        size = 0
        if context.get("size"):
            try:
                size = int(context["size"])
            except ValueError:
                raise invalid(f"volume attribute size={context['size']!r} is not a number of bytes") from None
        vol = Volume(id=volume_id, name=volume_id, capacity=size, ephemeral=True,
                     parameters={k: v for k, v in context.items() if not k.startswith("csi.storage.k8s.io/")})
        path = self.state.volume_path(volume_id)
        os.makedirs(path, mode=0o777, exist_ok=True)
        os.chmod(path, 0o777)
        self.state.volumes[volume_id] = vol
        return vol

    def _drop_ephemeral(self, vol: Volume) -> None:
        shutil.rmtree(self.state.volume_path(vol.id), ignore_errors=True)
        self.state.volumes.pop(vol.id, None)

    def node_volume_stats(self, volume_id: str, path: str) -> Stats:
        require(volume_id, "volume_id")
        require(path, "volume_path")
        with self.state.lock:
            vol = self._volume(volume_id)
            if path not in vol.published and path not in vol.staged:
                raise not_found(f"volume {volume_id} is not staged or published at {path}")
        st = os.statvfs(path)
        total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        return Stats(total=total, available=free, used=total - st.f_bfree * st.f_frsize,
                     inodes=st.f_files, inodes_free=st.f_ffree, inodes_used=st.f_files - st.f_ffree)

    def node_expand(self, volume_id: str, path: str, required: int, limit: int) -> int:
        require(volume_id, "volume_id")
        require(path, "volume_path")
        with self.state.lock:
            vol = self._volume(volume_id)
            if path not in vol.published and path not in vol.staged:
                raise not_found(f"volume {volume_id} is not staged or published at {path}")
            if not required and not limit:
                return vol.capacity
        return self.expand_volume(volume_id, required, limit)


def _gone() -> contextlib.suppress:
    """Removing what is already gone is success."""
    return contextlib.suppress(FileNotFoundError)


def _tar(directory: str, archive: str) -> None:
    """The volume's tree as a gzip'd tar, published at `archive` only when complete."""
    tmp = temp_path(archive)
    try:
        with tarfile.open(tmp, "w:gz") as t:
            t.add(directory, arcname=".")
    except BaseException:
        with _gone():
            os.unlink(tmp)
        raise
    publish(tmp, archive)


def _copy(source: str, directory: str) -> None:
    shutil.copytree(source, directory, symlinks=True, dirs_exist_ok=True)


def _untar(archive: str, directory: str) -> None:
    with tarfile.open(archive, "r:gz") as t:
        t.extractall(directory, filter="tar")
    os.chmod(directory, 0o777)

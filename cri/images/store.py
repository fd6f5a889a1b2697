"""The image store: content-addressed blobs, layers unpacked once per diff_id and shared by every image
that uses them, and one metadata file (`images.json`) replaced atomically under a lock.

Layout under `root` (default /var/lib/nodeagent/images):
    blobs/sha256/<hex>     manifests, configs (the image id is its config digest) and pulled layer blobs
    blobs/ingest/          partial downloads (renamed into blobs/ only once verified)
    layers/sha256/<hex>/   one unpacked layer per diff_id, in overlayfs whiteout format (a lowerdir)
    l/<16 hex>             short symlinks to layers/ (`layer_links`), so many lowerdirs fit one mount
    tmp/                   layers being unpacked (renamed into layers/ once complete and verified)
    pins/<pid>-<uuid>      digests a live pull or import is using: gc in any process keeps them
    images.json            image records (id, repo tags and digests, manifest digest, diff_ids, blobs)
                           and leases (owner -> digests kept for a container after its image is removed)
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from cri.images import archive as arc
from cri.images.blobs import BlobStore, split_digest
from cri.images.errors import AmbiguousReference, ImageError, ImageNotFound, InvalidReference
from cri.images.progress import LAYER_DONE, UNPACK, Progress, ProgressEvent, emit
from cri.images.reference import is_id, parse
from cri.images.registries import RegistriesConfig
from cri.images.unpack import unpack
from kernel.fs import atomic_symlink, atomic_write

log = logging.getLogger(__name__)

DEFAULT_ROOT = Path("/var/lib/nodeagent/images")
STATE_VERSION = 1
FS_INFO_TTL = 5.0  # seconds
STALE_AFTER = 6 * 3600  # seconds: a partial download or unpack older than this was left by a crash


@dataclasses.dataclass(frozen=True)
class Image:
    """An image as the runtime uses it: `layers` are overlay lowerdirs, bottom layer first."""

    id: str  # "sha256:<config digest>"
    repo_tags: list[str]
    repo_digests: list[str]
    size: int
    config: dict  # the config's "config" section: Entrypoint, Cmd, Env, WorkingDir, User, ...
    layers: list[Path]
    diff_ids: list[str] = dataclasses.field(default_factory=list)
    manifest_digest: str = ""
    os: str = "linux"
    architecture: str = ""


class _KeyedLocks:
    """One threading.Lock per key, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._locks: dict[str, list] = {}

    @contextlib.contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._mu:
            entry = self._locks.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._mu:
                entry[1] -= 1
                if not entry[1]:
                    self._locks.pop(key, None)


class ImageStore:
    def __init__(self, root: Path = DEFAULT_ROOT, registries: RegistriesConfig | None = None) -> None:
        self.root = Path(root)
        self.registries = registries or RegistriesConfig()
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.blobs = BlobStore(self.root / "blobs")
        self.layers_dir = self.root / "layers" / "sha256"
        self.layers_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir = self.root / "tmp"
        self.tmp_dir.mkdir(exist_ok=True)
        self.pins_dir = self.root / "pins"
        self.pins_dir.mkdir(exist_ok=True)
        self.meta_path = self.root / "images.json"
        self._lock_path = self.root / ".lock"
        self._mu = threading.RLock()
        self._cache: tuple[tuple[int, int, int], dict] | None = None
        self._layer_locks = _KeyedLocks()
        self._pins: collections.Counter[str] = collections.Counter()  # digests running pulls/imports use
        self._configs: dict[str, dict] = {}
        self._fs_cache: tuple[float, tuple[str, int, int]] | None = None
        self.clean_stale()

    def clean_stale(self, max_age: float = STALE_AFTER) -> int:
        """Remove partial downloads and unpacks left by a crash (old enough that no live pull owns them)."""
        import time

        removed = 0
        cutoff = time.time() - max_age
        for d in (self.tmp_dir, self.blobs.tmp_dir):
            for p in d.iterdir():
                try:
                    if p.lstat().st_mtime < cutoff:
                        _rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
                        removed += 1
                except FileNotFoundError:
                    pass
        return removed

    # ---- metadata -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        """Serialises metadata updates with other processes (a CLI beside the daemon)."""
        with self._mu:
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def _read_state(self) -> dict:
        try:
            st = os.stat(self.meta_path)
        except FileNotFoundError:
            return {"version": STATE_VERSION, "images": {}}
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._mu:
            if self._cache and self._cache[0] == stamp:
                return self._cache[1]
            state = json.loads(self.meta_path.read_bytes())
            self._cache = (stamp, state)
            return state

    def _write_state(self, state: dict) -> None:
        atomic_write(self.meta_path, json.dumps(state, sort_keys=True, indent=1))

    @contextlib.contextmanager
    def _update(self) -> Iterator[dict]:
        """Read-modify-write of the metadata under the file lock; written only if the body succeeds."""
        with self._file_lock():
            self._cache = None
            state = json.loads(json.dumps(self._read_state()))  # private copy
            yield state
            self._write_state(state)
            self._cache = None
            self._fs_cache = None

    def _config(self, image_id: str) -> dict:
        """The image config (immutable: named by its digest), cached."""
        cfg = self._configs.get(image_id)
        if cfg is None:
            try:
                cfg = json.loads(self.blobs.read(image_id))
            except FileNotFoundError:
                return {}
            if len(self._configs) > 512:
                self._configs.clear()
            self._configs[image_id] = cfg
        return cfg

    def _image(self, rec: dict) -> Image:
        cfg = self._config(rec["id"])
        return Image(
            id=rec["id"], repo_tags=list(rec.get("repo_tags", [])),
            repo_digests=list(rec.get("repo_digests", [])),
            size=int(rec.get("size", 0)), config=dict(cfg.get("config") or {}),
            layers=[self.layer_path(d) for d in rec.get("diff_ids", [])],
            diff_ids=list(rec.get("diff_ids", [])),
            manifest_digest=rec.get("manifest_digest", ""), os=cfg.get("os", "linux"),
            architecture=cfg.get("architecture", ""))

    # ---- queries --------------------------------------------------------------------------------------

    def list(self) -> list[Image]:
        return [self._image(r) for r in self._read_state()["images"].values()]

    def _find(self, state: dict, ref: str) -> tuple[dict | None, str | None]:
        """(record, the repo tag or digest that matched, if any)."""
        images = state["images"]
        if ref.startswith("sha256:") and ref in images:
            return images[ref], None
        parsed = None
        with contextlib.suppress(InvalidReference):
            parsed = parse(ref)
        if parsed is not None:
            key = parsed.digested or parsed.tagged
            field = "repo_digests" if parsed.digest else "repo_tags"
            for rec in images.values():
                if key in rec.get(field, []):
                    return rec, key
        if is_id(ref):
            prefix = ref if ref.startswith("sha256:") else "sha256:" + ref
            hits = [r for i, r in images.items() if i.startswith(prefix)]
            if len(hits) > 1:
                raise AmbiguousReference(f"image id prefix {ref!r} matches {len(hits)} images")
            if hits:
                return hits[0], None
        elif parsed is None:
            raise InvalidReference(f"invalid image reference {ref!r}")
        return None, None

    def resolve(self, ref: str) -> Image | None:
        """The image named by `ref` (name[:tag], name@digest, id or unambiguous id prefix), or None."""
        rec, _ = self._find(self._read_state(), ref)
        return self._image(rec) if rec else None

    def get(self, ref: str) -> Image:
        img = self.resolve(ref)
        if img is None:
            raise ImageNotFound(f"image {ref!r} not found")
        return img

    def layer_path(self, diff_id: str) -> Path:
        return self.layers_dir / split_digest(diff_id)[1]

    def layer_links(self, image: Image) -> builtins.list[Path]:
        """Short aliases (`<root>/l/<16 hex>` symlinks) of `image.layers`, bottom first, as Docker's overlay2
        does: overlay's mount options fit in one page, so ~37 absolute layer paths is the limit, ~90 with
        these (more with a chdir to `<root>/l` and relative names)."""
        links = self.root / "l"
        links.mkdir(exist_ok=True)
        out = []
        for diff_id in image.diff_ids:
            hexd = split_digest(diff_id)[1]
            link = links / hexd[:16]
            target = f"../layers/sha256/{hexd}"
            try:
                current = os.readlink(link)
            except FileNotFoundError:
                current = None
            if current != target:
                atomic_symlink(target, link)
            out.append(link)
        return out

    def has_layer(self, diff_id: str) -> bool:
        return self.layer_path(diff_id).is_dir()

    # ---- writes ---------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def pinned(self, digests: builtins.list[str]) -> Iterator[None]:
        """Keeps blobs and layers from garbage collection while a pull or import is using them, in this
        process (a counter) and in any other store on the same root (a pin file naming our pid)."""
        pin = self.pins_dir / f"{os.getpid()}-{uuid.uuid4().hex}"
        atomic_write(pin, json.dumps(list(digests)))  # the temporary name starts with ".": no reader sees it
        with self._mu:
            self._pins.update(digests)
        try:
            yield
        finally:
            with self._mu:
                self._pins.subtract(digests)
                self._pins += collections.Counter()  # drop zero counts
            pin.unlink(missing_ok=True)

    def _pinned_elsewhere(self) -> set[str]:
        """Digests pinned by live processes; pin files of dead ones are removed."""
        keep: set[str] = set()
        for p in self.pins_dir.iterdir():
            if p.name.startswith("."):
                continue
            pid = int(p.name.split("-", 1)[0]) if p.name.split("-", 1)[0].isdigit() else 0
            alive = pid > 0
            if alive and pid != os.getpid():
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    alive = False
                except PermissionError:
                    pass
            try:
                if alive:
                    keep.update(json.loads(p.read_text()))
                else:
                    p.unlink(missing_ok=True)
            except (FileNotFoundError, ValueError):
                continue
        return keep

    def ensure_layer(self, diff_id: str, opener: Callable[[], contextlib.AbstractContextManager[IO[bytes]]],
                     blob_digest: str | None = None, on_bytes: Callable[[int], None] | None = None) -> Path:
        """Unpack a layer once: concurrent callers wait for the first; blocking (run it in a thread)."""
        dest = self.layer_path(diff_id)
        if dest.is_dir():
            return dest
        with self._layer_locks.hold(diff_id):
            if dest.is_dir():
                return dest
            tmp = self.tmp_dir / f"layer-{split_digest(diff_id)[1][:16]}-{uuid.uuid4().hex}"
            tmp.mkdir(mode=0o755)
            try:
                with opener() as f:
                    unpack(f, tmp, expected_diff_id=diff_id, on_bytes=on_bytes,
                           expected_blob_digest=blob_digest)
                try:
                    os.rename(tmp, dest)
                except OSError as e:
                    if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                        raise
                    _rmtree(tmp)  # another process unpacked it first
            except BaseException:
                _rmtree(tmp)
                raise
        return dest

    def record(self, image_id: str, size: int, diff_ids: builtins.list[str], blobs: builtins.list[str],
               manifest_digest: str, tags: builtins.list[str], digests: builtins.list[str]) -> Image:
        """Add or update an image; a tag moves here from any image that had it. Names are normalised."""
        tags = [parse(t).tagged or t for t in tags]
        digests = [parse(d).digested or d for d in digests]
        with self._update() as state:
            missing = [d for d in diff_ids if not self.has_layer(d)]
            if missing:  # collected by another process's gc between unpack and now: the caller retries
                raise ImageError(f"layers {missing} vanished before image {image_id} was recorded")
            images = state["images"]
            for other in images.values():
                if other["id"] != image_id:
                    other["repo_tags"] = [t for t in other.get("repo_tags", []) if t not in tags]
            rec = images.setdefault(image_id, {"id": image_id, "repo_tags": [], "repo_digests": []})
            rec["repo_tags"] = _union(rec.get("repo_tags", []), tags)
            rec["repo_digests"] = _union(rec.get("repo_digests", []), digests)
            rec.update(size=size, diff_ids=diff_ids, blobs=_union(rec.get("blobs", []), blobs))
            rec["manifest_digest"] = manifest_digest or rec.get("manifest_digest", "")
        return self._image(rec)

    def lease(self, owner: str, image: Image | str) -> Image:
        """Keep `image`'s layers (and config) on disk for `owner` (e.g. a container id) until `release`:
        a container's overlay uses the layer dirs as lowerdirs, so removing the image while the container
        exists removes only the image record, as with containerd's snapshots. Persisted in images.json."""
        img = self.get(image) if isinstance(image, str) else image
        with self._update() as state:
            state.setdefault("leases", {})[owner] = [img.id, *img.diff_ids]
        return img

    def release(self, owner: str) -> bool:
        """Drop `owner`'s lease (idempotent) and collect what only it kept; True if it had one."""
        with self._update() as state:
            had = state.setdefault("leases", {}).pop(owner, None) is not None
        if had:
            self.gc()
        return had

    def leases(self) -> dict[str, builtins.list[str]]:
        return {k: list(v) for k, v in self._read_state().get("leases", {}).items()}

    def remove(self, ref: str) -> bool:
        """Remove a tag (the image stays while it has other tags) or, by id or digest, the whole image.
        Layers and blobs go only when no remaining image uses them. False if nothing matched."""
        with self._update() as state:
            rec, matched = self._find(state, ref)
            if rec is None:
                return False
            tags = rec.get("repo_tags", [])
            if matched in tags and len(tags) > 1:
                rec["repo_tags"] = [t for t in tags if t != matched]
            else:
                del state["images"][rec["id"]]
        self.gc()
        return True

    def gc(self) -> tuple[int, int]:
        """Delete layers and blobs no image references (and no running pull pins); (layers, blobs) removed."""
        with self._file_lock():
            self._cache = None
            state = self._read_state()
            keep: set[str] = {k for k, n in self._pins.items() if n > 0} | self._pinned_elsewhere()
            for leased in state.get("leases", {}).values():
                keep.update(leased)
            for rec in state["images"].values():
                keep.add(rec["id"])
                keep.update(rec.get("diff_ids", []))
                keep.update(rec.get("blobs", []))
                if rec.get("manifest_digest"):
                    keep.add(rec["manifest_digest"])
            self._fs_cache = None
            trash: list[Path] = []
            for p in list(self.layers_dir.iterdir()):
                if "sha256:" + p.name not in keep:
                    trash.append(self.tmp_dir / f"gc-{p.name[:16]}-{uuid.uuid4().hex}")
                    os.rename(p, trash[-1])  # atomic: the layer is never seen half-deleted
            blobs = 0
            for d in self.blobs.digests():
                if d not in keep:
                    self.blobs.delete(d)
                    blobs += 1
        links = self.root / "l"
        if links.is_dir():
            for link in links.iterdir():
                if link.is_symlink() and not link.exists():  # its layer is gone
                    link.unlink(missing_ok=True)
        for t in trash:  # the slow part, outside the lock
            _rmtree(t)
        return len(trash), blobs

    # ---- archives -------------------------------------------------------------------------------------

    def import_archive(self, path: Path, progress: Progress | None = None) -> builtins.list[Image]:
        """Import every image of an OCI layout (dir or tar) or docker-archive; blocking (use a thread)."""
        path = Path(path)
        src = arc.open_source(path)
        try:
            found = arc.read_archive(src, str(path))
            return [self._import_one(a, str(path), progress) for a in found]
        finally:
            src.close()

    def _import_one(self, a: arc.ArchivedImage, origin: str, progress: Progress | None) -> Image:
        ref = a.names[0] if a.names else origin
        pins = [a.config_digest, a.manifest_digest, *a.extra_blobs, *(la.diff_id for la in a.layers)]
        total = sum(la.size for la in a.layers)
        with self.pinned(pins):
            self.blobs.put(a.config_bytes, a.config_digest)
            self.blobs.put(a.manifest_bytes, a.manifest_digest)
            for digest, body in a.extra_blobs.items():
                self.blobs.put(body, digest)
            done = 0
            for la in a.layers:
                def on_bytes(n: int, base: int = done, la: arc.ArchivedLayer = la) -> None:
                    emit(progress, ProgressEvent(UNPACK, ref, la.digest, base + n, total))

                self.ensure_layer(la.diff_id, la.open, la.digest if la.verify_blob else None, on_bytes)
                done += la.size
                emit(progress, ProgressEvent(LAYER_DONE, ref, la.digest, done, total))
            names_digests = [f"{n.rsplit(':', 1)[0]}@{a.manifest_digest}" for n in a.names]
            top = list(a.extra_blobs)[:1]
            if top:  # an index: its digest names the image too, as a registry would
                names_digests += [f"{n.rsplit(':', 1)[0]}@{top[0]}" for n in a.names]
            return self.record(a.config_digest, a.size, [la.diff_id for la in a.layers],
                               [a.manifest_digest, *a.extra_blobs], a.manifest_digest, a.names, names_digests)

    # ---- usage ----------------------------------------------------------------------------------------

    def fs_info(self, max_age: float = FS_INFO_TTL) -> tuple[str, int, int]:
        """(mountpoint of the filesystem holding the store, bytes used by the store, inodes used).

        A walk of the store, so it is cached for `max_age` seconds (kubelet asks every few seconds);
        hardlinked files count once."""
        import time

        now = time.monotonic()
        cached = self._fs_cache
        if cached and now - cached[0] < max_age:
            return cached[1]
        used = 0
        seen: set[tuple[int, int]] = set()
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in dirnames + filenames:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue
                key = (st.st_dev, st.st_ino)
                if key not in seen:
                    seen.add(key)
                    used += st.st_blocks * 512
        result = (_mountpoint(self.root), used, len(seen))
        self._fs_cache = (now, result)
        return result


def _mountpoint(path: Path) -> str:
    p = path.resolve()
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return str(p)


def _union(a: list[str], b: list[str]) -> list[str]:
    return list(dict.fromkeys([*a, *b]))


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)

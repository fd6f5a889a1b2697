"""Reading local image archives: OCI image layouts (a directory or a tar of one) and docker-archive
tarballs (`docker save`). Produces `ArchivedImage`s the store ingests; nothing here writes."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import posixpath
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from cri.images import manifest as mf
from cri.images.blobs import sha256_digest, split_digest
from cri.images.errors import ArchiveError, DigestMismatch, ImageError, InvalidReference
from cri.images.reference import parse

NAME_ANNOTATION = "io.containerd.image.name"
REF_ANNOTATION = "org.opencontainers.image.ref.name"


@dataclasses.dataclass
class ArchivedLayer:
    diff_id: str
    digest: str  # blob digest (compressed); equals diff_id for docker-archive's plain tars
    size: int
    open: Callable[[], contextlib.AbstractContextManager[IO[bytes]]]
    verify_blob: bool = True  # hash the raw bytes too (OCI blobs are named by their digest)


@dataclasses.dataclass
class ArchivedImage:
    names: list[str]  # normalised name:tag references
    config_bytes: bytes
    config_digest: str
    manifest_bytes: bytes
    manifest_digest: str
    layers: list[ArchivedLayer]
    size: int
    extra_blobs: dict[str, bytes] = dataclasses.field(default_factory=dict)  # e.g. the index it came from


class _Source:
    """Files of an archive, addressed by their path inside it."""

    def open(self, rel: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        raise NotImplementedError

    def exists(self, rel: str) -> bool:
        raise NotImplementedError

    def read(self, rel: str) -> bytes:
        with self.open(rel) as f:
            return f.read()

    def close(self) -> None:
        pass


class _DirSource(_Source):
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, rel: str) -> Path:
        p = (self.root / rel).resolve()
        if not p.is_relative_to(self.root):
            raise ArchiveError(f"{rel!r} points outside the layout")
        return p

    def exists(self, rel: str) -> bool:
        return self._path(rel).is_file()

    @contextlib.contextmanager
    def open(self, rel: str) -> Iterator[IO[bytes]]:
        try:
            f = self._path(rel).open("rb")
        except FileNotFoundError:
            raise ArchiveError(f"{rel} missing from {self.root}") from None
        with f:
            yield f


class _TarSource(_Source):
    def __init__(self, path: Path) -> None:
        try:
            self.tar = tarfile.open(path, "r:*")
        except (tarfile.TarError, OSError) as e:
            raise ArchiveError(f"{path}: not a tar archive: {e}") from None
        self.members = {posixpath.normpath(m.name.lstrip("/")): m for m in self.tar.getmembers()}

    def _member(self, rel: str) -> tarfile.TarInfo:
        m = self.members.get(posixpath.normpath(rel.lstrip("/")))
        seen = 0
        while m is not None and (m.issym() or m.islnk()) and seen < 16:  # docker save links repeated layers
            target = m.linkname if m.islnk() else posixpath.join(posixpath.dirname(m.name), m.linkname)
            m = self.members.get(posixpath.normpath(target.lstrip("/")))
            seen += 1
        if m is None or not m.isreg():
            raise ArchiveError(f"{rel} missing from the archive")
        return m

    def exists(self, rel: str) -> bool:
        try:
            self._member(rel)
            return True
        except ArchiveError:
            return False

    @contextlib.contextmanager
    def open(self, rel: str) -> Iterator[IO[bytes]]:
        f = self.tar.extractfile(self._member(rel))
        assert f is not None
        with f:
            yield f

    def close(self) -> None:
        self.tar.close()


def open_source(path: Path) -> _Source:
    if path.is_dir():
        return _DirSource(path)
    if path.is_file():
        return _TarSource(path)
    raise ArchiveError(f"{path}: no such file or directory")


def read_archive(src: _Source, origin: str = "") -> list[ArchivedImage]:
    """Every image the archive holds. docker-archive's manifest.json wins when both kinds are present."""
    if src.exists("manifest.json"):
        return _docker_archive(src)
    if src.exists("index.json"):
        return _oci_layout(src)
    raise ArchiveError(f"{origin or 'archive'}: neither an OCI image layout (index.json) nor a "
                       "docker-archive (manifest.json)")


def _normalise(name: str) -> str | None:
    try:
        ref = parse(name)
    except InvalidReference:
        return None
    return ref.tagged or ref.digested


def _json(data: bytes, what: str) -> dict | list:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ArchiveError(f"{what} is not valid JSON: {e}") from None


def _blob_path(digest: str) -> str:
    algo, hexd = split_digest(digest)
    return f"blobs/{algo}/{hexd}"


def _verified_blob(src: _Source, desc: mf.Descriptor) -> bytes:
    data = src.read(_blob_path(desc.digest))
    if sha256_digest(data) != desc.digest:
        raise DigestMismatch(f"blob {desc.digest} in the archive does not match its digest")
    return data


def _oci_layout(src: _Source) -> list[ArchivedImage]:
    index = _json(src.read("index.json"), "index.json")
    if not isinstance(index, dict):
        raise ArchiveError("index.json is not an object")
    out: list[ArchivedImage] = []
    tops = mf.parse_index(json.dumps(index).encode())
    want = mf.host_platform()
    # a layout of one image for several platforms lists each manifest with its platform: keep ours
    usable = [t for t in tops if t.platform is None or mf.platform_matches(t.platform, want)]
    if tops and not usable:
        raise ArchiveError(f"the layout has no image for this platform ({want})")
    for top in usable:
        names = []
        ann = top.annotations or {}
        if ann.get(NAME_ANNOTATION):
            names.append(ann[NAME_ANNOTATION])
        elif ann.get(REF_ANNOTATION) and ("/" in ann[REF_ANNOTATION] or ":" in ann[REF_ANNOTATION]):
            names.append(ann[REF_ANNOTATION])
        extra: dict[str, bytes] = {}
        desc = top
        body = _verified_blob(src, desc)
        for _ in range(4):  # nested indexes
            if not mf.is_index(mf.media_type_of(body, desc.media_type)):
                break
            extra[desc.digest] = body
            desc = mf.select_manifest(mf.parse_index(body))
            body = _verified_blob(src, desc)
        manifest = mf.parse_manifest(body, desc.media_type)
        config_bytes = _verified_blob(src, manifest.config)
        diff_ids = _diff_ids(config_bytes)
        if len(diff_ids) != len(manifest.layers):
            raise ArchiveError(f"manifest {desc.digest} has {len(manifest.layers)} layers, its config "
                               f"{len(diff_ids)} diff_ids")
        layers = [ArchivedLayer(d, ld.digest, ld.size, _opener(src, _blob_path(ld.digest)))
                  for d, ld in zip(diff_ids, manifest.layers, strict=True)]
        size = manifest.config.size + sum(ld.size for ld in manifest.layers)
        out.append(ArchivedImage([n for n in map(_normalise, names) if n], config_bytes,
                                 manifest.config.digest, body, desc.digest, layers, size, extra))
    return out


def _diff_ids(config_bytes: bytes) -> list[str]:
    cfg = _json(config_bytes, "image config")
    try:
        if not isinstance(cfg, dict):  # a JSON list is no image config either
            raise TypeError
        diff_ids = list(cfg["rootfs"]["diff_ids"])
    except (KeyError, TypeError):
        raise ArchiveError("image config has no rootfs.diff_ids") from None
    for d in diff_ids:
        split_digest(d)
    return diff_ids


def _opener(src: _Source, rel: str) -> Callable[[], contextlib.AbstractContextManager[IO[bytes]]]:
    return lambda: src.open(rel)


def _docker_archive(src: _Source) -> list[ArchivedImage]:
    entries = _json(src.read("manifest.json"), "manifest.json")
    if not isinstance(entries, list):
        raise ArchiveError("manifest.json is not a list")
    out = []
    for entry in entries:
        try:
            config_name, layer_names = entry["Config"], list(entry["Layers"])
        except (KeyError, TypeError):
            raise ArchiveError("manifest.json entry without Config/Layers") from None
        config_bytes = src.read(config_name)
        config_digest = sha256_digest(config_bytes)
        diff_ids = _diff_ids(config_bytes)
        if len(diff_ids) != len(layer_names):
            raise ArchiveError(f"{config_name}: {len(layer_names)} layers but {len(diff_ids)} diff_ids")
        layers, descs, size = [], [], len(config_bytes)
        for diff_id, name in zip(diff_ids, layer_names, strict=True):
            with src.open(name) as f:
                f.seek(0, 2)
                lsize = f.tell()
            size += lsize
            # the layer file may itself be compressed (newer docker save); its digest is then unknown
            layers.append(ArchivedLayer(diff_id, diff_id, lsize, _opener(src, name), verify_blob=False))
            descs.append({"mediaType": "application/vnd.docker.image.rootfs.diff.tar", "digest": diff_id,
                          "size": lsize})
        # a manifest for the image as it would be pushed uncompressed: gives it a stable repo digest
        manifest_bytes = json.dumps({
            "schemaVersion": 2, "mediaType": mf.DOCKER_MANIFEST,
            "config": {"mediaType": mf.DOCKER_CONFIG, "digest": config_digest, "size": len(config_bytes)},
            "layers": descs}, sort_keys=True, separators=(",", ":")).encode()
        names = [n for n in map(_normalise, entry.get("RepoTags") or []) if n]
        out.append(ArchivedImage(names, config_bytes, config_digest, manifest_bytes,
                                 sha256_digest(manifest_bytes), layers, size))
    return out


__all__ = ["ArchivedImage", "ArchivedLayer", "ImageError", "open_source", "read_archive"]

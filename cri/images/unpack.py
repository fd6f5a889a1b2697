"""Safe layer unpacking: a layer tar becomes a directory usable directly as an overlayfs lowerdir.

Every path is created relative to directory file descriptors opened with O_NOFOLLOW, one component at a
time, so nothing is ever written through a symlink or above the layer root, whatever the tar says:
`..` that climbs above the root, entries under a symlinked directory and hardlinks to outside targets are
skipped; symlinks themselves are kept verbatim (they only matter inside the container's rootfs). Block and
character devices are skipped (a container gets its /dev from the runtime); AUFS whiteouts become overlayfs
ones: `.wh.NAME` -> a 0/0 character device NAME, `.wh..wh..opq` -> `trusted.overlay.opaque=y` on the dir.
Ownership is kept when running as root, and mode bits (setuid/setgid/sticky too) are applied after chown.
"""

from __future__ import annotations

import dataclasses
import errno
import gzip
import hashlib
import logging
import os
import posixpath
import shutil
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol

from cri.images.errors import CorruptLayer, DigestMismatch, UnsafeLayer

log = logging.getLogger(__name__)

WHITEOUT_PREFIX = ".wh."
WHITEOUT_OPAQUE = ".wh..wh..opq"
OPAQUE_XATTR = "trusted.overlay.opaque"
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
CHUNK = 1 << 20

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclasses.dataclass
class UnpackStats:
    """What an unpack did; `skipped` lists (path, reason) for every entry refused as unsafe."""

    diff_id: str = ""
    size: int = 0  # uncompressed tar bytes
    entries: int = 0
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)


class Reader(Protocol):
    """What a layer is read through: a file, a decompressor, a hashing reader."""

    def read(self, n: int = -1, /) -> bytes: ...


class _HashingReader:
    """Wraps the decompressed stream so the tar's diff_id is computed while it is read."""

    def __init__(self, raw: Reader, on_bytes: Callable[[int], None] | None = None) -> None:
        self.raw = raw
        self.sha = hashlib.sha256()
        self.count = 0
        self.on_bytes = on_bytes

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.sha.update(data)
        self.count += len(data)
        return data

    def drain(self) -> None:
        while self.read(CHUNK):
            pass


def sniff(stream: IO[bytes]) -> bytes:
    """The first bytes of a seekable stream (left at offset 0)."""
    head = stream.read(4)
    stream.seek(0)
    return head


def open_decompressed(raw: Reader, head: bytes) -> Reader:
    """A reader of the tar stream for a gzip, zstd or plain layer, told apart by magic bytes. (Both
    decompressors' stubs ask for a seekable file; reading a stream forward, they only call read().)"""
    if head[:2] == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[call-overload]  # seek is for rewind()
    if head == ZSTD_MAGIC:
        import zstandard

        zstd = zstandard.ZstdDecompressor()
        return zstd.stream_reader(raw, read_across_frames=True)  # type: ignore[arg-type]  # only read()s
    return raw


def clean_path(name: str) -> str | None:
    """Normalise a tar member name to a path relative to the layer root, or None if it escapes."""
    p = posixpath.normpath("/" + name).lstrip("/")
    # normpath of "/.." is "/": a name that climbed above the root must be refused, not folded into it
    depth = 0
    for comp in name.split("/"):
        if comp in ("", "."):
            continue
        depth = depth - 1 if comp == ".." else depth + 1
        if depth < 0:
            return None
    return p if p not in ("", ".") else ""


class _Root:
    """Directory fds below the layer root, opened one component at a time without following symlinks."""

    def __init__(self, root: Path) -> None:
        self.fd = os.open(root, _DIR_FLAGS)
        self._cache: tuple[str, int] | None = None

    def close(self) -> None:
        self._drop_cache()
        os.close(self.fd)

    def _drop_cache(self) -> None:
        if self._cache:
            os.close(self._cache[1])
            self._cache = None

    def invalidate(self, rel: str) -> None:
        if self._cache and (self._cache[0] == rel or self._cache[0].startswith(rel + "/") or not rel):
            self._drop_cache()

    def parent(self, rel: str, create: bool = True) -> int:
        """An fd for the directory `rel` (created 0755 if missing); raises UnsafeLayer through a symlink."""
        if not rel:
            return self.fd
        if self._cache and self._cache[0] == rel:
            return self._cache[1]
        fd = os.dup(self.fd)
        try:
            for comp in rel.split("/"):
                try:
                    nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(comp, 0o755, dir_fd=fd)
                    nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise UnsafeLayer(f"{rel}: {comp} is not a directory (symlink or file)") from None
                    raise
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        self._drop_cache()
        self._cache = (rel, fd)
        return fd


def _remove_existing(pfd: int, name: str, keep_dir: bool) -> None:
    """Remove what is at `name` so a later entry can replace it (a dir stays if the new entry is a dir)."""
    try:
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        if keep_dir:
            return
        shutil.rmtree(name, dir_fd=pfd)
    else:
        os.unlink(name, dir_fd=pfd)


def _set_owner_mode(root: _Root, pfd: int, name: str, member: tarfile.TarInfo, as_root: bool,
                    fd: int | None = None) -> None:
    if as_root:
        if fd is not None:
            os.fchown(fd, member.uid, member.gid)
        else:
            os.chown(name, member.uid, member.gid, dir_fd=pfd, follow_symlinks=False)
    if member.issym():
        return
    mode = member.mode & 0o7777
    if not as_root:
        mode &= 0o1777  # an unprivileged unpack cannot honour setuid/setgid for other owners
    if fd is not None:
        os.fchmod(fd, mode)
    else:
        os.chmod(name, mode, dir_fd=pfd)


def _apply_xattrs(fd: int, member: tarfile.TarInfo, as_root: bool) -> None:
    for key, value in (member.pax_headers or {}).items():
        if not key.startswith("SCHILY.xattr."):
            continue
        attr = key[len("SCHILY.xattr."):]
        if attr.startswith("trusted.overlay.") or (not as_root and not attr.startswith("user.")):
            continue
        try:
            os.setxattr(fd, attr, value.encode("utf-8", "surrogateescape"))
        except OSError as e:
            log.debug("xattr %s on %s not kept: %s", attr, member.name, e)


def unpack(stream: IO[bytes], dest: Path, expected_diff_id: str | None = None,
           on_bytes: Callable[[int], None] | None = None,
           expected_blob_digest: str | None = None) -> UnpackStats:
    """Unpack a (possibly compressed) layer tar into the empty directory `dest`, verifying its diff_id.

    Blocking: call it from a worker thread. Raises DigestMismatch if the uncompressed bytes do not hash to
    `expected_diff_id` (or the raw bytes to `expected_blob_digest`); the caller then discards `dest`.
    `stream` must be seekable at its start (a file).
    """
    as_root = os.geteuid() == 0
    head = sniff(stream)
    raw = _HashingReader(stream)
    compressed = head[:2] == GZIP_MAGIC or head == ZSTD_MAGIC
    reader = _HashingReader(open_decompressed(raw, head)) if compressed else raw
    stats = UnpackStats()
    root = _Root(dest)
    dirs: list[tuple[str, int]] = []
    try:
        if head:  # an empty blob is an empty layer
            _extract(reader, raw, root, as_root, stats, dirs,
                     lambda: on_bytes(raw.count) if on_bytes else None)
        for rel, mtime in reversed(dirs):
            try:
                fd = root.parent(rel, create=False)
                os.utime(fd, (mtime, mtime))
            except (OSError, UnsafeLayer):
                pass
    finally:
        root.close()
    stats.size = reader.count
    stats.diff_id = "sha256:" + reader.sha.hexdigest()
    if expected_diff_id and stats.diff_id != expected_diff_id:
        raise DigestMismatch(f"layer content is {stats.diff_id}, the image config says {expected_diff_id}")
    blob = "sha256:" + raw.sha.hexdigest()
    if expected_blob_digest and blob != expected_blob_digest:
        raise DigestMismatch(f"layer blob hashes to {blob}, the manifest says {expected_blob_digest}")
    return stats


def _extract(reader: _HashingReader, raw: _HashingReader, root: _Root, as_root: bool, stats: UnpackStats,
             dirs: list[tuple[str, int]], tick: Callable[[], None]) -> None:
    import zlib

    import zstandard

    try:
        stream = tarfile.open(  # type: ignore[call-overload]  # typeshed wants seek etc.; "r|" only reads
            fileobj=reader, mode="r|", errorlevel=1)
        with stream as tar:
            for member in tar:
                stats.entries += 1
                try:
                    _entry(tar, root, member, as_root, stats, dirs)
                except UnsafeLayer as e:
                    stats.skipped.append((member.name, str(e)))
                    log.warning("layer entry %r skipped: %s", member.name, e)
                tick()
        reader.drain()  # tar padding and anything after the end blocks count towards the digests
        raw.drain()
    except (tarfile.TarError, EOFError, zlib.error, zstandard.ZstdError, gzip.BadGzipFile) as e:
        raise CorruptLayer(f"layer is not a valid tar stream: {e}") from None


def _entry(tar: tarfile.TarFile, root: _Root, member: tarfile.TarInfo, as_root: bool,
           stats: UnpackStats, dirs: list[tuple[str, int]]) -> None:
    rel = clean_path(member.name)
    if rel is None:
        raise UnsafeLayer("path climbs above the layer root")
    if rel == "":
        if member.isdir():  # the root itself: only its metadata
            _set_owner_mode(root, root.fd, ".", member, as_root, fd=root.fd)
        return
    parent, name = posixpath.split(rel)
    base = name
    if base.startswith(WHITEOUT_PREFIX):
        _whiteout(root, parent, base, as_root)
        return
    pfd = root.parent(parent)
    if member.isdir():
        _remove_existing(pfd, name, keep_dir=True)
        try:
            os.mkdir(name, 0o700, dir_fd=pfd)
        except FileExistsError:
            pass
        root.invalidate(rel)
        fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
        try:
            _set_owner_mode(root, pfd, name, member, as_root, fd=fd)
            _apply_xattrs(fd, member, as_root)
        finally:
            os.close(fd)
        dirs.append((rel, int(member.mtime)))
        return
    _remove_existing(pfd, name, keep_dir=False)
    root.invalidate(rel)
    if member.isreg():
        src = tar.extractfile(member)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=pfd)
        try:
            assert src is not None
            while chunk := src.read(CHUNK):
                _write_all(fd, chunk)
            _set_owner_mode(root, pfd, name, member, as_root, fd=fd)
            _apply_xattrs(fd, member, as_root)
            os.utime(fd, (member.mtime, member.mtime))
        finally:
            os.close(fd)
    elif member.issym():
        os.symlink(member.linkname, name, dir_fd=pfd)  # kept verbatim; never followed while unpacking
        _set_owner_mode(root, pfd, name, member, as_root)
        os.utime(name, (member.mtime, member.mtime), dir_fd=pfd, follow_symlinks=False)
    elif member.islnk():
        target = clean_path(member.linkname)
        if not target:
            raise UnsafeLayer(f"hardlink target {member.linkname!r} is outside the layer")
        tparent, tname = posixpath.split(target)
        try:
            if tparent == parent:
                tfd, own = pfd, False
            else:
                tfd, own = os.dup(root.parent(tparent, create=False)), True
                pfd = root.parent(parent)
            try:
                st = os.stat(tname, dir_fd=tfd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    raise UnsafeLayer(f"hardlink target {member.linkname!r} is a directory")
                os.link(tname, name, src_dir_fd=tfd, dst_dir_fd=pfd, follow_symlinks=False)
            finally:
                if own:
                    os.close(tfd)
        except FileNotFoundError:
            raise UnsafeLayer(f"hardlink target {member.linkname!r} does not exist in this layer") from None
    elif member.isfifo():
        os.mkfifo(name, 0o600, dir_fd=pfd)
        _set_owner_mode(root, pfd, name, member, as_root)
    elif member.ischr() or member.isblk():
        raise UnsafeLayer("device node not created (the runtime provides /dev)")
    else:
        raise UnsafeLayer(f"unsupported tar entry type {member.type!r}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _whiteout(root: _Root, parent: str, base: str, as_root: bool) -> None:
    pfd = root.parent(parent)
    if base == WHITEOUT_OPAQUE:
        os.setxattr(pfd, OPAQUE_XATTR, b"y")
        return
    if base.startswith(WHITEOUT_PREFIX + WHITEOUT_PREFIX):
        return  # other AUFS meta files (.wh..wh.plnk, .wh..wh.aufs): meaningless to overlayfs
    name = base[len(WHITEOUT_PREFIX):]
    if not name or name in (".", ".."):
        raise UnsafeLayer("malformed whiteout")
    _remove_existing(pfd, name, keep_dir=False)
    root.invalidate(posixpath.join(parent, name))
    os.mknod(name, stat.S_IFCHR | 0o000, os.makedev(0, 0), dir_fd=pfd)

"""Content-addressed blob storage: `blobs/sha256/<hex>`, written to a temp file and renamed into place
only once the bytes hash to the digest that names them."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from cri.images.errors import DigestMismatch, InvalidReference
from kernel.fs import AtomicFile

_DIGEST = re.compile(r"(sha256):([a-f0-9]{64})")


def split_digest(digest: str) -> tuple[str, str]:
    m = _DIGEST.fullmatch(digest or "")
    if not m:
        raise InvalidReference(f"unsupported or malformed digest {digest!r} (sha256 only)")
    return m.group(1), m.group(2)


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class BlobWriter:
    """Streams bytes into a temp file (in the ingest dir) while hashing them; `commit` verifies them and
    renames the file into place durably (kernel.fs.AtomicFile)."""

    def __init__(self, store: BlobStore, expected: str, expected_size: int = -1) -> None:
        split_digest(expected)
        self.store, self.expected, self.expected_size = store, expected, expected_size
        self.dest = store.path(expected)
        self.file = AtomicFile(self.dest, 0o644, tmp_dir=store.tmp_dir)
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self.sha.update(data)
        self.size += len(data)
        self.file.write(data)

    def commit(self) -> Path:
        got = "sha256:" + self.sha.hexdigest()
        if got != self.expected or (self.expected_size >= 0 and self.size != self.expected_size):
            self.file.abort()
            size = f" (expected {self.expected_size} bytes)" if self.expected_size >= 0 else ""
            raise DigestMismatch(f"blob {self.expected}: received {self.size} bytes hashing to {got}{size}")
        self.file.commit()
        return self.dest

    def abort(self) -> None:
        self.file.abort()


class BlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / "sha256"
        self.tmp_dir = root / "ingest"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)

    def path(self, digest: str) -> Path:
        return self.dir / split_digest(digest)[1]

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def read(self, digest: str) -> bytes:
        return self.path(digest).read_bytes()

    def writer(self, digest: str, size: int = -1) -> BlobWriter:
        return BlobWriter(self, digest, size)

    def put(self, data: bytes, digest: str | None = None) -> str:
        """Store `data`; if `digest` is given it must match (DigestMismatch otherwise)."""
        digest = digest or sha256_digest(data)
        if self.has(digest):
            return digest
        w = self.writer(digest, len(data))
        try:
            w.write(data)
            w.commit()
        except BaseException:
            w.abort()
            raise
        return digest

    def delete(self, digest: str) -> None:
        self.path(digest).unlink(missing_ok=True)

    def digests(self) -> list[str]:
        return ["sha256:" + p.name for p in self.dir.iterdir() if _DIGEST.fullmatch("sha256:" + p.name)]

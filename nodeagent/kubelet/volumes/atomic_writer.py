"""The kubelet's AtomicWriter (pkg/volume/util/atomic_writer.go) for configMap/secret/downwardAPI/projected.

Layout of a target directory:

    ..2026_11_22_19_10_00.123456789/   the current payload (timestamped)
    ..data -> ..2026_11_22_19_10_00.123456789
    key -> ..data/key                   user-visible names (top-level path components only)

An update writes a new timestamped directory, points `..data_tmp` at it and renames it over `..data`
(one atomic rename), fixes the user-visible links, then removes older generations, keeping the one it
just replaced until the next update. A reader who opens `key` sees the old or the new content, never a
mix and never a missing file.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from kernel.fs import atomic_symlink, atomic_write

DATA_DIR = "..data"
DATA_DIR_TMP = "..data_tmp"
MAX_PATH_LENGTH = 4096
MAX_FILE_NAME_LENGTH = 255


class PayloadError(ValueError):
    """An invalid payload path (the message is kubelet's)."""


@dataclasses.dataclass(frozen=True)
class FileProjection:
    data: bytes
    mode: int = 0o644


def validate_path(p: str) -> None:
    if len(p) > MAX_PATH_LENGTH:
        raise PayloadError(f"invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters")
    if p == "":
        raise PayloadError("invalid path: must not be empty")
    if p.startswith("/"):
        raise PayloadError(f"invalid path: must be relative path: {p}")
    items = p.split("/")
    for item in items:
        if item == "..":
            raise PayloadError(f"invalid path: must not contain '..': {p}")
        if len(item) > MAX_FILE_NAME_LENGTH:
            raise PayloadError("invalid path: filenames must be less than or equal to "
                               f"{MAX_FILE_NAME_LENGTH} characters")
    if items[0].startswith(".."):
        raise PayloadError(f"invalid path: must not start with '..': {p}")


def clean_payload(payload: Mapping[str, FileProjection]) -> dict[str, FileProjection]:
    out = {}
    for p, content in payload.items():
        validate_path(p)
        out[os.path.normpath(p)] = content
    return out


def _top(p: str) -> str:
    return p.split("/", 1)[0]


class AtomicWriter:
    def __init__(self, target_dir: str | os.PathLike, now=None) -> None:
        self.target = Path(target_dir)
        self._now = now or (lambda: datetime.datetime.now(datetime.UTC).timestamp())

    def current_dir(self) -> Path | None:
        link = self.target / DATA_DIR
        if not link.is_symlink():
            return None
        return self.target / os.readlink(link)

    def _current_paths(self, ts_dir: Path) -> set[str]:
        out = set()
        for root, _dirs, files in os.walk(ts_dir):
            for f in files:
                out.add(os.path.relpath(os.path.join(root, f), ts_dir))
        return out

    def _unchanged(self, ts_dir: Path, payload: Mapping[str, FileProjection]) -> bool:
        if self._current_paths(ts_dir) != set(payload):
            return False
        for p, proj in payload.items():
            f = ts_dir / p
            try:
                if f.read_bytes() != proj.data or (f.stat().st_mode & 0o7777) != proj.mode:
                    return False
            except OSError:
                return False
        for p in payload:
            if not (self.target / _top(p)).is_symlink():
                return False
        return True

    def write(self, payload: Mapping[str, FileProjection]) -> bool:
        """Make the target show exactly `payload`; returns False when it already did (nothing written)."""
        payload = clean_payload(payload)
        self.target.mkdir(parents=True, exist_ok=True)
        old_ts = self.current_dir()
        if old_ts is not None and old_ts.is_dir() and self._unchanged(old_ts, payload):
            return False
        old_paths = self._current_paths(old_ts) if old_ts is not None and old_ts.is_dir() else set()
        stamp = datetime.datetime.fromtimestamp(self._now(), datetime.UTC).strftime("..%Y_%m_%d_%H_%M_%S.")
        ts_dir = Path(tempfile.mkdtemp(prefix=stamp, dir=self.target))
        try:
            os.chmod(ts_dir, 0o755)
            for p, proj in payload.items():
                f = ts_dir / p
                f.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
                atomic_write(f, proj.data, proj.mode)
                os.chmod(f, proj.mode)  # exactly the projection's mode, whatever the umask
            atomic_symlink(ts_dir.name, self.target / DATA_DIR, tmp=self.target / DATA_DIR_TMP)
        except BaseException:
            shutil.rmtree(ts_dir, ignore_errors=True)
            raise
        new_tops = {_top(p) for p in payload}
        for top in sorted(new_tops):
            link = self.target / top
            if not link.is_symlink():
                os.symlink(os.path.join(DATA_DIR, top), link)
        for top in sorted({_top(p) for p in old_paths} - new_tops):
            link = self.target / top
            if link.is_symlink():
                link.unlink()
        # Older generations go now; the one just replaced stays until the next update. (The kubelet removes
        # it at once, so a reader that resolved ..data just before the rename can get ENOENT opening `key`.)
        keep = {ts_dir.name, old_ts.name if old_ts is not None else ""}
        for entry in os.scandir(self.target):
            if entry.name.startswith("..") and entry.name not in keep \
                    and entry.name not in (DATA_DIR, DATA_DIR_TMP) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
        return True

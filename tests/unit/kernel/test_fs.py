"""kernel.fs: the one atomic, durable file replacement (fsync of the file, rename, fsync of the dir)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from kernel import fs


class FsyncSpy:
    """os.fsync's stand-in: notes (kind, inode, what `target` held at that moment), then syncs."""

    def __init__(self, seen: list[tuple[str, int, bytes | None]]) -> None:
        self.seen = seen
        self.target: Path | None = None
        self._real = os.fsync

    def __call__(self, fd: int) -> None:
        st = os.fstat(fd)
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
        target = self.target
        held = target.read_bytes() if target is not None and target.exists() else None
        self.seen.append((kind, st.st_ino, held))
        self._real(fd)


@pytest.fixture
def fsyncs(monkeypatch):
    """Every os.fsync, as (kind, inode, what the target file held at that moment)."""
    seen: list[tuple[str, int, bytes | None]] = []
    spy = FsyncSpy(seen)
    monkeypatch.setattr(os, "fsync", spy)
    return seen, spy


def test_atomic_write_fsyncs_the_file_before_the_rename_and_the_dir_after(tmp_path, fsyncs):
    seen, spy = fsyncs
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    spy.target = target
    fs.atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert [k for k, _, _ in seen] == ["file", "dir"]
    (_, file_ino, before), (_, dir_ino, after) = seen
    assert before == b"old"  # the data was made durable before it replaced the old file
    assert file_ino == target.stat().st_ino  # and it is the file now at the target
    assert dir_ino == tmp_path.stat().st_ino and after == b"new"  # the rename, made durable
    assert os.listdir(tmp_path) == ["state.json"]


def test_atomic_write_takes_text_and_mode(tmp_path):
    target = tmp_path / "key"
    old = os.umask(0o022)
    try:
        fs.atomic_write(target, "sécret", 0o600)
        fs.atomic_write(tmp_path / "open", "x")
    finally:
        os.umask(old)
    assert target.read_text() == "sécret"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "open").stat().st_mode) == 0o644  # 0666 less the umask, as open(2)


def test_a_failed_rename_removes_the_temporary_file_and_keeps_the_old_content(tmp_path, monkeypatch):
    target = tmp_path / "f"
    target.write_bytes(b"old")

    def refuse(src, dst):
        raise OSError(errno.EXDEV, "no")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError):
        fs.atomic_write(target, b"new")
    assert os.listdir(tmp_path) == ["f"] and target.read_bytes() == b"old"


def test_a_failed_write_removes_the_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "f"
    target.write_bytes(b"old")

    def full(fd, data):
        raise OSError(errno.ENOSPC, "full")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError) as e:
        fs.atomic_write(target, b"new")
    assert e.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == ["f"] and target.read_bytes() == b"old"


def test_a_failed_fsync_removes_the_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "f"

    def eio(fd):
        raise OSError(errno.EIO, "io")

    monkeypatch.setattr(os, "fsync", eio)
    with pytest.raises(OSError):
        fs.atomic_write(target, b"new")
    assert os.listdir(tmp_path) == []


def test_atomic_file_streams_commits_on_success_and_aborts_on_error(tmp_path):
    target = tmp_path / "blob"
    ingest = tmp_path / "ingest"
    ingest.mkdir()
    with fs.AtomicFile(target, tmp_dir=ingest) as f:
        f.write(b"a" * 100_000)
        f.write(b"b")
        assert not target.exists() and len(os.listdir(ingest)) == 1  # written aside until complete
    assert target.read_bytes() == b"a" * 100_000 + b"b" and os.listdir(ingest) == []
    with pytest.raises(ValueError), fs.AtomicFile(target, tmp_dir=ingest) as f:
        f.write(b"half")
        raise ValueError("digest mismatch")
    assert target.read_bytes() == b"a" * 100_000 + b"b" and os.listdir(ingest) == []


def test_temporary_names_are_hidden_and_unique(tmp_path):
    a, b = fs.temp_path(tmp_path / "x.json"), fs.temp_path(tmp_path / "x.json")
    assert a != b
    assert os.path.dirname(a) == str(tmp_path) and os.path.basename(a).startswith(".x.json.")


def test_publish_renames_a_file_someone_else_wrote_and_removes_it_on_failure(tmp_path, fsyncs, monkeypatch):
    seen, _ = fsyncs
    target = tmp_path / "plugin"
    tmp = fs.temp_path(target)
    with open(tmp, "wb") as f:  # e.g. a compiler's output
        f.write(b"\x7fELF")
    fs.publish(tmp, target)
    assert target.read_bytes() == b"\x7fELF" and [k for k, _, _ in seen] == ["file", "dir"]
    tmp2 = fs.temp_path(target)
    open(tmp2, "wb").close()
    monkeypatch.setattr(os, "replace", lambda s, d: (_ for _ in ()).throw(OSError(errno.EACCES, "no")))
    with pytest.raises(OSError):
        fs.publish(tmp2, target)
    assert sorted(os.listdir(tmp_path)) == ["plugin"]


def test_atomic_symlink_replaces_the_link_in_one_rename(tmp_path):
    link = tmp_path / "..data"
    fs.atomic_symlink("gen1", link, tmp=tmp_path / "..data_tmp")
    assert os.readlink(link) == "gen1"
    os.symlink("stale", tmp_path / "..data_tmp")  # left by a crash between symlink and rename
    fs.atomic_symlink("gen2", link, tmp=tmp_path / "..data_tmp")
    assert os.readlink(link) == "gen2" and sorted(os.listdir(tmp_path)) == ["..data"]
    fs.atomic_symlink("gen3", link)
    assert os.readlink(link) == "gen3" and sorted(os.listdir(tmp_path)) == ["..data"]

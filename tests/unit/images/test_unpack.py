"""Unsafe layer tars, built here, never write outside the layer directory."""

import gzip
import hashlib
import io
import os
import stat
import tarfile

import pytest
import zstandard

from cri.images.errors import DigestMismatch
from cri.images.unpack import clean_path, unpack


def _tar(entries) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e["name"])
            info.mode = e.get("mode", 0o644)
            info.uid, info.gid = e.get("uid", 0), e.get("gid", 0)
            info.mtime = 1_700_000_000
            kind = e.get("type", "file")
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, e["target"]
            elif kind == "link":
                info.type, info.linkname = tarfile.LNKTYPE, e["target"]
            elif kind in ("chr", "blk"):
                info.type = tarfile.CHRTYPE if kind == "chr" else tarfile.BLKTYPE
                info.devmajor, info.devminor = 1, 3
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            data = e.get("data", b"")
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return buf.getvalue()


@pytest.fixture
def box(tmp_path):
    """A layer dir and, beside it, an 'outside' dir with a file that must never change."""
    layer = tmp_path / "layer"
    layer.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("untouched")
    return layer, outside


def _unpack(data: bytes, layer):
    return unpack(io.BytesIO(data), layer)


def _outside_intact(outside):
    assert sorted(os.listdir(outside)) == ["secret"]
    assert (outside / "secret").read_text() == "untouched"
    assert os.stat(outside / "secret").st_nlink == 1


@pytest.mark.parametrize("name", ["../evil", "../outside/evil", "a/../../evil", "./../evil", "/../../evil"])
def test_path_traversal_refused(box, name):
    layer, outside = box
    stats = _unpack(_tar([{"name": name, "data": b"x"}, {"name": "ok", "data": b"fine"}]), layer)
    assert [s[0] for s in stats.skipped] == [name]
    assert (layer / "ok").read_text() == "fine"
    assert not (layer.parent / "evil").exists()
    _outside_intact(outside)


def test_absolute_leading_slash_stays_inside(box):
    layer, outside = box
    _unpack(_tar([{"name": "/etc/conf", "data": b"in"}]), layer)
    assert (layer / "etc" / "conf").read_text() == "in"


@pytest.mark.parametrize("target_kind", ["absolute", "relative"])
def test_escaping_symlink_kept_but_never_written_through(box, target_kind):
    layer, outside = box
    target = str(outside) if target_kind == "absolute" else "../outside"
    stats = _unpack(_tar([
        {"name": "link", "type": "sym", "target": target},
        {"name": "link/pwned", "data": b"owned"},
        {"name": "link/secret", "data": b"overwritten"},
    ]), layer)
    assert os.readlink(layer / "link") == target  # kept verbatim, it only matters inside the rootfs
    assert len(stats.skipped) == 2
    _outside_intact(outside)


def test_file_replacing_symlink_does_not_follow_it(box):
    layer, outside = box
    _unpack(_tar([
        {"name": "s", "type": "sym", "target": str(outside / "secret")},
        {"name": "s", "data": b"replaced"},
    ]), layer)
    assert not os.path.islink(layer / "s") and (layer / "s").read_text() == "replaced"
    _outside_intact(outside)


def test_dir_replaced_by_symlink_then_written_into(box):
    layer, outside = box
    _unpack(_tar([
        {"name": "d", "type": "dir", "mode": 0o755},
        {"name": "d", "type": "sym", "target": str(outside)},
        {"name": "d/secret", "data": b"overwritten"},
    ]), layer)
    assert os.path.islink(layer / "d")
    _outside_intact(outside)


def test_hardlink_escapes_refused(box):
    layer, outside = box
    stats = _unpack(_tar([
        {"name": "esc", "type": "link", "target": "../outside/secret"},
        {"name": "dirlink", "type": "sym", "target": str(outside)},
        {"name": "via", "type": "link", "target": "dirlink/secret"},
        {"name": "abs", "type": "link", "target": str(outside / "secret")},
        {"name": "real", "data": b"inside"},
        {"name": "twin", "type": "link", "target": "real"},
    ]), layer)
    assert not (layer / "esc").exists() and not (layer / "via").exists() and not (layer / "abs").exists()
    assert {s[0] for s in stats.skipped} == {"esc", "via", "abs"}
    assert os.stat(layer / "twin").st_ino == os.stat(layer / "real").st_ino
    _outside_intact(outside)


def test_device_nodes_skipped_fifo_kept(box):
    layer, outside = box
    stats = _unpack(_tar([
        {"name": "dev", "type": "dir", "mode": 0o755},
        {"name": "dev/null", "type": "chr"},
        {"name": "dev/sda", "type": "blk"},
        {"name": "pipe", "type": "fifo"},
    ]), layer)
    assert os.listdir(layer / "dev") == []
    assert {s[0] for s in stats.skipped} == {"dev/null", "dev/sda"}
    assert stat.S_ISFIFO(os.lstat(layer / "pipe").st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership and setuid are only kept when unpacking as root")
def test_owner_and_setuid_kept(box):
    layer, _ = box
    _unpack(_tar([
        {"name": "bin", "type": "dir", "mode": 0o755},
        {"name": "bin/su", "data": b"#!", "mode": 0o4755, "uid": 0, "gid": 0},
        {"name": "home", "type": "dir", "mode": 0o1777, "uid": 1000, "gid": 1000},
        {"name": "home/f", "data": b"x", "mode": 0o2640, "uid": 1000, "gid": 100},
    ]), layer)
    st = os.stat(layer / "bin" / "su")
    assert stat.S_IMODE(st.st_mode) == 0o4755
    st = os.stat(layer / "home" / "f")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1000, 100, 0o2640)
    assert stat.S_IMODE(os.stat(layer / "home").st_mode) == 0o1777


@pytest.mark.parametrize("compress", ["none", "gzip", "zstd"])
def test_compressions_and_diff_id(tmp_path, compress):
    raw = _tar([{"name": "a/b", "data": b"hello" * 1000}])
    compressors = {"none": lambda b: b, "gzip": gzip.compress, "zstd": zstandard.ZstdCompressor().compress}
    blob = compressors[compress](raw)
    diff_id = "sha256:" + hashlib.sha256(raw).hexdigest()
    stats = unpack(io.BytesIO(blob), tmp_path, expected_diff_id=diff_id,
                   expected_blob_digest="sha256:" + hashlib.sha256(blob).hexdigest())
    assert stats.diff_id == diff_id and stats.size == len(raw)
    assert (tmp_path / "a" / "b").read_bytes() == b"hello" * 1000


def test_diff_id_and_blob_mismatch(tmp_path):
    raw = _tar([{"name": "f", "data": b"x"}])
    (tmp_path / "1").mkdir()
    with pytest.raises(DigestMismatch):
        unpack(io.BytesIO(raw), tmp_path / "1", expected_diff_id="sha256:" + "0" * 64)
    (tmp_path / "2").mkdir()
    with pytest.raises(DigestMismatch):
        unpack(io.BytesIO(gzip.compress(raw)), tmp_path / "2", expected_blob_digest="sha256:" + "0" * 64)


def test_clean_path():
    assert clean_path("./a/./b/") == "a/b"
    assert clean_path("/abs/x") == "abs/x"
    assert clean_path("a/../b") == "b"
    assert clean_path("a/../../b") is None
    assert clean_path("./") == ""


@pytest.mark.parametrize("blob", [b"\x1f\x8b" + b"garbage" * 50, b"\x28\xb5\x2f\xfd" + b"junk" * 50,
                                  gzip.compress(b"not a tar" * 100)])
def test_corrupt_layers_are_typed_errors(tmp_path, blob):
    from cri.images.errors import CorruptLayer

    with pytest.raises(CorruptLayer):
        unpack(io.BytesIO(blob), tmp_path)


def test_empty_blob_is_an_empty_layer(tmp_path):
    stats = unpack(io.BytesIO(b""), tmp_path, expected_diff_id="sha256:" + hashlib.sha256(b"").hexdigest())
    assert stats.entries == 0 and os.listdir(tmp_path) == []


def test_pax_xattrs_kept_but_overlay_ones_refused(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("f")
        info.size = 1
        info.pax_headers = {"SCHILY.xattr.user.origin": "layer",
                            "SCHILY.xattr.trusted.overlay.redirect": "/etc"}
        tar.addfile(info, io.BytesIO(b"x"))
        d = tarfile.TarInfo("d")
        d.type = tarfile.DIRTYPE
        d.mode = 0o755
        d.pax_headers = {"SCHILY.xattr.trusted.overlay.opaque": "y"}  # only a .wh..wh..opq entry may do this
        tar.addfile(d)
    unpack(io.BytesIO(buf.getvalue()), tmp_path)
    try:
        assert os.getxattr(tmp_path / "f", "user.origin") == b"layer"
    except OSError as e:  # a filesystem without user xattrs
        pytest.skip(f"user xattrs unsupported here: {e}")
    for path, attr in ((tmp_path / "f", "trusted.overlay.redirect"),
                       (tmp_path / "d", "trusted.overlay.opaque")):
        with pytest.raises(OSError):
            os.getxattr(path, attr)

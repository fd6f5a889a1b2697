"""Store bookkeeping that needs no root: metadata, tags, stale temp files (layers built here,
no whiteouts)."""

import io
import os
import tarfile
import time

import pytest

from cri.images.blobs import sha256_digest
from cri.images.errors import AmbiguousReference, InvalidReference
from cri.images.store import Image, ImageStore


def _layer(name: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    return buf.getvalue()


def _add(store: ImageStore, name: str, tags: list[str]) -> str:
    raw = _layer(name)
    diff_id = sha256_digest(raw)
    store.ensure_layer(diff_id, lambda: io.BytesIO(raw))
    config = f'{{"config": {{"Cmd": ["{name}"]}}, "rootfs": {{"diff_ids": ["{diff_id}"]}}}}'.encode()
    cid = store.blobs.put(config)
    return store.record(cid, len(raw), [diff_id], [], "", tags, []).id


def _image(store: ImageStore, ref: str) -> Image:
    """The image `ref` resolves to, which must exist."""
    img = store.resolve(ref)
    assert img is not None, ref
    return img


def test_resolve_forms_and_tag_moves(tmp_path):
    store = ImageStore(tmp_path)
    a = _add(store, "a", ["busybox:1"])
    b = _add(store, "b", ["example.com/x/y:2"])
    assert _image(store, "docker.io/library/busybox:1").id == a
    assert _image(store, "busybox:1").config == {"Cmd": ["a"]}
    assert _image(store, b).id == b and _image(store, b[7:15]).id == b
    assert store.resolve("busybox:2") is None and store.resolve("sha256:" + "f" * 64) is None
    with pytest.raises(InvalidReference):
        store.resolve("Not A Ref!")
    # the tag moves: b gets busybox:1, a is left untagged
    store.record(b, 2, _image(store, b).diff_ids, [], "", ["busybox:1"], [])
    assert _image(store, "busybox:1").id == b and _image(store, a).repo_tags == []


def test_ambiguous_prefix(tmp_path):
    store = ImageStore(tmp_path)
    ids = [_add(store, f"f{i}", [f"img:{i}"]) for i in range(40)]
    common = {i[7] for i in ids}
    c = next(c for c in common if sum(i[7] == c for i in ids) > 1)
    with pytest.raises(AmbiguousReference):
        store.resolve(c)


def test_layer_path_is_reused_and_metadata_is_replaced_atomically(tmp_path):
    store = ImageStore(tmp_path)
    a = _add(store, "same", ["one:1"])
    b = _add(store, "same", ["two:1"])
    assert a == b  # same config and layer: one image with two tags
    assert sorted(_image(store, a).repo_tags) == ["docker.io/library/one:1", "docker.io/library/two:1"]
    assert len(os.listdir(store.layers_dir)) == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".images.json")] == []


def test_stale_temp_files_are_cleaned(tmp_path):
    store = ImageStore(tmp_path)
    old = store.tmp_dir / "layer-dead"
    old.mkdir()
    partial = store.blobs.tmp_dir / "abc.partial"
    partial.write_bytes(b"x")
    fresh = store.tmp_dir / "layer-live"
    fresh.mkdir()
    past = time.time() - 7 * 3600
    os.utime(old, (past, past))
    os.utime(partial, (past, past))
    ImageStore(tmp_path)
    assert not old.exists() and not partial.exists() and fresh.exists()


def test_gc_keeps_what_another_live_process_pins(tmp_path):
    import json
    import subprocess

    store = ImageStore(tmp_path)
    a = _add(store, "a", ["a:1"])
    layer = _image(store, a).layers[0]
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (store.pins_dir / f"{sleeper.pid}-x").write_text(json.dumps(_image(store, a).diff_ids))
        (store.pins_dir / "999999999-dead").write_text(json.dumps(["sha256:" + "0" * 64]))
        other = ImageStore(tmp_path)  # as a CLI beside the daemon
        assert other.remove(a)
        assert layer.is_dir()  # pinned by a live process: kept
        assert not (store.pins_dir / "999999999-dead").exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert store.gc() == (1, 0) and not layer.exists()
    assert os.listdir(store.pins_dir) == []


def test_fs_info_counts_and_is_refreshed_by_writes(tmp_path):
    store = ImageStore(tmp_path)
    _, used0, inodes0 = store.fs_info()
    a = _add(store, "a", ["a:1"])
    mount, used1, inodes1 = store.fs_info()
    assert os.path.ismount(mount) and used1 > used0 and inodes1 > inodes0
    assert store.remove(a)
    assert store.fs_info()[2] < inodes1


def test_lease_keeps_layers_of_a_removed_image_until_released(tmp_path):
    store = ImageStore(tmp_path)
    a = _add(store, "a", ["a:1"])
    img = store.lease("container-1", "a:1")
    store.lease("container-2", img)
    assert store.remove("a:1") and store.resolve("a:1") is None
    assert img.layers[0].is_dir() and store.blobs.has(img.id)  # still used by the containers
    assert ImageStore(tmp_path).leases() == {
        "container-1": [a, *img.diff_ids], "container-2": [a, *img.diff_ids]}
    assert store.release("container-1") and img.layers[0].is_dir()
    assert store.release("container-2") and not img.layers[0].exists() and not store.blobs.has(img.id)
    assert not store.release("container-2")  # idempotent

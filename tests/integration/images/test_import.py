"""Importing the harness's images (OCI layouts and docker archives) into a real store, as root."""

import os
import stat
import subprocess

import pytest

from cri.images import ImageStore

pytestmark = pytest.mark.root


@pytest.fixture
def store(tmp_path):
    return ImageStore(tmp_path / "images")


@pytest.mark.parametrize("form", ["oci_dir", "docker_archive", "oci_tar"])
def test_import_busybox(store, images, form, tmp_path):
    built = images.busybox
    if form == "oci_tar":
        src = tmp_path / "oci.tar"
        subprocess.run(["tar", "-C", str(built.oci_dir), "-cf", str(src), "."], check=True)
    else:
        src = getattr(built, form)
    events = []
    (img,) = store.import_archive(src, progress=events.append)
    assert img.id == built.config_digest
    assert img.repo_tags == ["localhost/busybox:latest"]
    assert img.repo_digests and all(d.startswith("localhost/busybox@sha256:") for d in img.repo_digests)
    if form != "docker_archive":
        assert f"localhost/busybox@{built.manifest_digest}" in img.repo_digests
    assert img.diff_ids == list(built.diff_ids)
    assert img.config["Cmd"] == ["sh"]
    (layer,) = img.layers
    assert os.access(layer / "bin" / "busybox", os.X_OK)
    assert os.readlink(layer / "bin" / "sh") == "busybox" or os.readlink(layer / "bin" / "sh").endswith("busybox")
    assert (layer / "etc" / "passwd").read_text().startswith("root:x:0:0")
    assert stat.S_IMODE(os.stat(layer / "tmp").st_mode) == 0o1777
    assert events and events[-1].current == events[-1].total
    assert store.resolve("localhost/busybox") == img
    assert store.resolve(img.id[7:19]) == img
    assert store.resolve(img.repo_digests[0]) == img


def test_configured_image_config(store, images):
    (base,) = store.import_archive(images.busybox.oci_dir)
    (img,) = store.import_archive(images.configured.docker_archive)
    assert img.config["Entrypoint"] == ["/bin/sh", "-c"]
    assert img.config["WorkingDir"] == "/work" and img.config["User"] == "1000:1000"
    assert "GREETING=hello" in img.config["Env"]
    assert img.config["Labels"] == {"org.example.purpose": "runtime-tests"}
    assert (img.layers[1] / "work" / "data.txt").read_text() == "layer two\n"
    assert img.layers[0] == base.layers[0]  # the same diff_id is unpacked once, whichever archive brought it


def test_whiteouts_become_overlay_whiteouts(store, images, res):
    (img,) = store.import_archive(images.whiteout.oci_dir)
    top = img.layers[-1]
    st = os.lstat(top / "etc" / "removed.txt")
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(0, 0)
    assert os.getxattr(top / "opaque", "trusted.overlay.opaque") == b"y"
    assert not any(n.startswith(".wh.") for _, dirs, files in os.walk(top) for n in dirs + files)

    mnt = res.mountpoint()
    lower = ":".join(str(p) for p in reversed(img.layers))  # overlay wants the top layer first
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={lower}", str(mnt)], check=True)
    try:
        assert not (mnt / "etc" / "removed.txt").exists()
        assert (mnt / "etc" / "passwd").exists()
        assert sorted(os.listdir(mnt / "opaque")) == ["new.txt"]
        assert (mnt / "bin" / "busybox").exists()
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_layers_shared_and_removal_keeps_them(store, images):
    (busybox,) = store.import_archive(images.busybox.oci_dir)
    (httpd,) = store.import_archive(images.httpd.oci_dir)
    (configured,) = store.import_archive(images.configured.oci_dir)
    assert busybox.layers[0] == configured.layers[0] == httpd.layers[0]
    layers = set(os.listdir(store.layers_dir))
    assert len(layers) == 2
    assert store.remove(configured.repo_tags[0])
    assert store.resolve(configured.id) is None
    assert not configured.layers[1].exists()  # its own layer went
    assert busybox.layers[0].exists()  # the shared one stays
    assert not store.blobs.has(configured.id)
    assert store.remove(busybox.id)
    assert httpd.layers[0].exists() and store.resolve("localhost/httpd:v1") == httpd
    assert store.remove("localhost/httpd:v1")
    assert os.listdir(store.layers_dir) == [] and store.list() == []
    assert store.blobs.digests() == []
    assert not store.remove("localhost/httpd:v1")


def test_tag_moves_and_multi_tag_removal(store, images):
    (a,) = store.import_archive(images.busybox.oci_dir)
    store.record(a.id, a.size, a.diff_ids, [], a.manifest_digest, ["docker.io/library/busybox:extra"], [])
    img = store.resolve("busybox:extra")
    assert img.id == a.id and sorted(img.repo_tags) == ["docker.io/library/busybox:extra", "localhost/busybox:latest"]
    assert store.remove("busybox:extra")  # only the tag goes
    assert store.resolve(a.id).repo_tags == ["localhost/busybox:latest"]


def test_metadata_survives_a_new_store(store, images, tmp_path):
    (a,) = store.import_archive(images.httpd.docker_archive)
    again = ImageStore(store.root)
    assert again.resolve("localhost/httpd:v1") == a
    mount, used, inodes = again.fs_info()
    assert os.path.ismount(mount) and used > a.size // 2 and inodes > 200


async def test_pull_by_digest_of_a_present_image_needs_no_registry(store, images):
    (img,) = store.import_archive(images.busybox.oci_dir)
    # localhost has no registry listening: only the local content can answer
    assert await store.pull(f"localhost/busybox@{images.busybox.manifest_digest}") == img

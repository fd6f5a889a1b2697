"""Importing the harness's images (OCI layouts and docker archives) into a real store, as root."""

import os
import stat
import subprocess
from pathlib import Path

import pytest

from cri.images import ImageStore, pull_image
from cri.images.progress import ProgressEvent

pytestmark = pytest.mark.root


@pytest.fixture
def store(tmp_path):
    return ImageStore(tmp_path / "images")


@pytest.mark.parametrize("form", ["oci_dir", "docker_archive", "oci_tar", "docker_archive_gz"])
def test_import_busybox(store, images, form, tmp_path):
    built = images.busybox
    if form == "oci_tar":
        src = tmp_path / "oci.tar"
        subprocess.run(["tar", "-C", str(built.oci_dir), "-cf", str(src), "."], check=True)
    elif form == "docker_archive_gz":  # docker save | gzip
        import gzip

        src = tmp_path / "busybox.tar.gz"
        src.write_bytes(gzip.compress(built.docker_archive.read_bytes()))
    else:
        src = getattr(built, form)
    events: list[ProgressEvent] = []
    (img,) = store.import_archive(src, progress=events.append)
    assert img.id == built.config_digest
    assert img.repo_tags == ["localhost/busybox:latest"]
    assert img.repo_digests and all(d.startswith("localhost/busybox@sha256:") for d in img.repo_digests)
    if not form.startswith("docker_archive"):
        assert f"localhost/busybox@{built.manifest_digest}" in img.repo_digests
    assert img.diff_ids == list(built.diff_ids)
    assert img.config["Cmd"] == ["sh"]
    (layer,) = img.layers
    assert os.access(layer / "bin" / "busybox", os.X_OK)
    sh = os.readlink(layer / "bin" / "sh")
    assert sh == "busybox" or sh.endswith("busybox")
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
    links = store.layer_links(httpd)
    assert store.remove("localhost/httpd:v1")
    assert os.listdir(store.layers_dir) == [] and store.list() == []
    assert not any(p.is_symlink() for p in links)  # aliases of collected layers go too
    assert store.blobs.digests() == []
    assert not store.remove("localhost/httpd:v1")


def test_tag_moves_and_multi_tag_removal(store, images):
    (a,) = store.import_archive(images.busybox.oci_dir)
    store.record(a.id, a.size, a.diff_ids, [], a.manifest_digest, ["docker.io/library/busybox:extra"], [])
    img = store.resolve("busybox:extra")
    assert img.id == a.id and sorted(img.repo_tags) == [
        "docker.io/library/busybox:extra", "localhost/busybox:latest"]
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
    assert await pull_image(store, f"localhost/busybox@{images.busybox.manifest_digest}") == img


@pytest.mark.parametrize("nested", [True, False])
def test_multi_platform_layout_imports_this_hosts_image(store, images, tmp_path, nested):
    from tests.integration.images.conftest import make_index_layout

    layout = make_index_layout(tmp_path / "oci", images.httpd, images.whiteout, nested=nested)
    imported = store.import_archive(layout)
    assert [i.id for i in imported] == [images.httpd.config_digest]
    assert [i.id for i in store.list()] == [images.httpd.config_digest]


def test_malicious_docker_archive_cannot_write_outside(store, tmp_path):
    """A docker-archive whose layer climbs out, writes through escaping symlinks and links outside files."""
    import hashlib
    import io
    import json
    import tarfile

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("untouched")

    def entry(tar, name, kind="file", data=b"x", target="", mode=0o644):
        info = tarfile.TarInfo(name)
        info.mode = mode
        if kind == "file":
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            return
        info.type = {"sym": tarfile.SYMTYPE, "link": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE}[kind]
        info.linkname = target
        tar.addfile(info)

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        entry(tar, "../../../../../../" + str(outside / "climbed").lstrip("/"))
        entry(tar, "abs", "sym", target=str(outside))
        entry(tar, "abs/planted", data=b"owned")
        entry(tar, "rel", "sym", target="../" * 12 + str(outside).lstrip("/"))
        entry(tar, "rel/secret", data=b"overwritten")
        entry(tar, "hl", "link", target="../" * 12 + str(outside / "secret").lstrip("/"))
        entry(tar, "mem", "chr")
        entry(tar, "bin/ok", data=b"fine", mode=0o4755)
    layer = buf.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/ok"]},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    archive = tmp_path / "evil.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in (("layer.tar", layer), ("config.json", config),
                           ("manifest.json", json.dumps([{"Config": "config.json", "RepoTags": ["evil:1"],
                                                          "Layers": ["layer.tar"]}]).encode())):
            entry(tar, name, data=data)
    (img,) = store.import_archive(archive)
    root = img.layers[0]
    assert sorted(os.listdir(outside)) == ["secret"] and (outside / "secret").read_text() == "untouched"
    assert os.stat(outside / "secret").st_nlink == 1
    assert os.readlink(root / "abs") == str(outside) and os.path.islink(root / "rel")
    assert not (root / "hl").exists() and not (root / "mem").exists()
    assert (root / "bin" / "ok").read_bytes() == b"fine"
    assert stat.S_IMODE(os.stat(root / "bin" / "ok").st_mode) == 0o4755
    for _, _, files in os.walk(store.root):  # nothing named like the payloads anywhere in the store
        assert "climbed" not in files and "planted" not in files


def test_many_layers_mount_through_short_links(tmp_path, res):
    import shutil
    import tempfile

    from nodeagent.testing.images import Entry, ImageSpec, build

    short = Path(tempfile.mkdtemp(prefix="na-"))  # a root as short as /var/lib/nodeagent/images
    store = ImageStore(short)
    try:
        _many_layers(store, tmp_path, res, Entry, ImageSpec, build)
    finally:
        shutil.rmtree(short)


def _many_layers(store, tmp_path, res, Entry, ImageSpec, build):
    n = 70
    spec = ImageSpec("localhost/tall", "v1",
                     extra_layers=tuple((Entry(f"layers/{i:03d}", data=f"{i}".encode()),) for i in range(n)))
    (img,) = store.import_archive(build(spec, tmp_path / "src").oci_dir)
    assert len(img.layers) == n + 1
    links = store.layer_links(img)
    assert [p.resolve() for p in links] == [p.resolve() for p in img.layers]
    lower = ":".join(str(p) for p in reversed(links))
    # absolute paths would not fit a page
    assert len(lower) < 4000 < len(":".join(str(p) for p in img.layers))
    mnt = res.mountpoint()
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={lower}", str(mnt)], check=True)
    try:
        assert len(os.listdir(mnt / "layers")) == n and (mnt / "layers" / "069").read_text() == "69"
        assert (mnt / "bin" / "busybox").exists()
    finally:
        subprocess.run(["umount", str(mnt)], check=True)

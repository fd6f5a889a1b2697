import hashlib
import json
import tarfile

from nodeagent.testing import images


def _blob(layout, digest):
    return (layout / "blobs" / "sha256" / digest.split(":")[1]).read_bytes()


def test_oci_layout_is_consistent(tmp_path):
    built = images.build(images.CONFIGURED, tmp_path)
    index = json.loads((built.oci_dir / "index.json").read_text())
    desc = index["manifests"][0]
    assert desc["digest"] == built.manifest_digest
    manifest_bytes = _blob(built.oci_dir, built.manifest_digest)
    assert "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() == built.manifest_digest
    manifest = json.loads(manifest_bytes)
    config = json.loads(_blob(built.oci_dir, manifest["config"]["digest"]))
    assert config["config"]["Entrypoint"] == ["/bin/sh", "-c"]
    assert config["config"]["WorkingDir"] == "/work"
    assert config["config"]["User"] == "1000:1000"
    assert "GREETING=hello" in config["config"]["Env"]
    assert len(config["rootfs"]["diff_ids"]) == len(manifest["layers"]) == 2
    for layer in manifest["layers"]:
        blob = _blob(built.oci_dir, layer["digest"])
        assert len(blob) == layer["size"]


def test_builds_are_deterministic(tmp_path):
    a = images.build(images.BUSYBOX, tmp_path / "a")
    b = images.build(images.BUSYBOX, tmp_path / "b")
    assert a.manifest_digest == b.manifest_digest


def test_busybox_layer_has_shell_and_applets(tmp_path):
    built = images.build(images.BUSYBOX, tmp_path)
    with tarfile.open(built.docker_archive) as outer:
        manifest_file = outer.extractfile("manifest.json")
        assert manifest_file is not None
        manifest = json.load(manifest_file)
        assert manifest[0]["RepoTags"] == ["localhost/busybox:latest"]
        layer = outer.extractfile(manifest[0]["Layers"][0])
        with tarfile.open(fileobj=layer) as inner:
            names = set(inner.getnames())
            assert {"bin/busybox", "bin/sh", "bin/sleep", "etc/passwd"} <= names
            assert inner.getmember("bin/sh").issym()
            httpd = [n for n in names if n.endswith("/httpd")]
            assert httpd, "busybox must provide httpd for the network tests"


def test_whiteout_layers(tmp_path):
    built = images.build(images.WHITEOUT, tmp_path)
    assert len(built.diff_ids) == 3


def test_docker_refs():
    assert images._docker_ref(images.ImageSpec("busybox")) == "docker.io/library/busybox:latest"
    assert images._docker_ref(images.ImageSpec("foo/bar", "1")) == "docker.io/foo/bar:1"
    assert images._docker_ref(images.ImageSpec("127.0.0.1:5000/x", "2")) == "127.0.0.1:5000/x:2"

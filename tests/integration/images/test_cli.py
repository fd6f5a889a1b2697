"""`nodeagent image import|pull|ls|rm` as a person runs them."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.root


def _cli(state, *args):
    return subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(state), *args],
                          capture_output=True, text=True, timeout=120)


def test_import_ls_rm(images, tmp_path):
    state = tmp_path / "images"
    p = _cli(state, "import", str(images.whiteout.docker_archive))
    assert p.returncode == 0, p.stderr
    assert f"imported localhost/whiteout:v1 {images.whiteout.config_digest}" in p.stdout
    assert "100%" in p.stderr  # the tqdm bar reached the end
    p = _cli(state, "import", str(images.httpd.oci_dir), "--no-progress")
    assert p.returncode == 0 and p.stderr == ""
    p = _cli(state, "ls")
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["IMAGE", "TAG", "IMAGE", "ID", "SIZE"]
    assert any(line.split()[:3] == ["localhost/httpd", "v1", images.httpd.config_digest[7:20]]
               for line in lines)
    listed = json.loads(_cli(state, "ls", "-o", "json").stdout)
    assert {i["id"] for i in listed} == {images.whiteout.config_digest, images.httpd.config_digest}
    info = json.loads(_cli(state, "inspect", "localhost/httpd:v1").stdout)
    assert info["id"] == images.httpd.config_digest and info["config"]["ExposedPorts"] == {"80/tcp": {}}
    assert all(Path(p).is_dir() for p in info["layers"])
    assert _cli(state, "inspect", "nothing:here").returncode == 1
    assert _cli(state, "rm", "localhost/whiteout:v1").returncode == 0
    assert _cli(state, "ls", "-q").stdout.split() == [images.httpd.config_digest]
    p = _cli(state, "rm", "localhost/whiteout:v1")
    assert p.returncode == 1 and "not found" in p.stderr


def test_import_from_stdin(images, tmp_path):
    state = tmp_path / "images"
    with open(images.configured.docker_archive, "rb") as f:
        p = subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(state), "import",
                            "--no-progress", "-"], stdin=f, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"imported localhost/configured:v1 {images.configured.config_digest}" in p.stdout
    assert list((state / "tmp").iterdir()) == []  # the spooled copy is gone


def test_import_of_garbage_fails_cleanly(tmp_path):
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar at all" * 100)
    p = _cli(tmp_path / "images", "import", str(junk))
    assert p.returncode == 1 and p.stderr.startswith("error:")


@pytest.mark.slow
def test_pull_with_registries_file(registry, images, tmp_path):
    reg = tmp_path / "registries.yaml"
    reg.write_text(f'mirrors:\n  registry.k8s.io:\n    endpoint: ["http://{registry.host}"]\n')
    state = tmp_path / "images"
    p = _cli(state, "pull", "registry.k8s.io/pause:3.9", "--registries", str(reg))
    assert p.returncode == 0, p.stderr
    assert f"pulled registry.k8s.io/pause:3.9 {images.busybox.config_digest}" in p.stdout
    assert "100%" in p.stderr
    p = _cli(state, "pull", "registry.k8s.io/nothing:here", "--registries", str(reg), "--no-progress")
    assert p.returncode == 1 and "not found" in p.stderr


@pytest.mark.slow
def test_concurrent_pulls_from_separate_processes(registry, images, tmp_path):
    state = tmp_path / "images"
    refs = [f"{registry.host}/test/configured:v1", f"{registry.host}/test/configured:v1",
            f"{registry.host}/test/busybox:latest", f"{registry.host}/test/httpd:v1"]
    procs = [subprocess.Popen([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(state), "pull",
                               "--no-progress", ref], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for ref in refs]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    listed = {i["id"]: i for i in json.loads(_cli(state, "ls", "-o", "json").stdout)}
    assert set(listed) == {
        images.configured.config_digest, images.busybox.config_digest, images.httpd.config_digest}
    layers = {d[7:] for b in (images.configured, images.busybox, images.httpd) for d in b.diff_ids}
    assert {p.name for p in (state / "layers" / "sha256").iterdir()} == layers
    assert list((state / "tmp").iterdir()) == [] and list((state / "blobs" / "ingest").iterdir()) == []
    assert list((state / "pins").iterdir()) == []

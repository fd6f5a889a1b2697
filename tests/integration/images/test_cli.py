"""`nodeagent image import|pull|ls|rm` as a person runs them."""

import json
import subprocess
import sys

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
    assert any(line.split()[:3] == ["localhost/httpd", "v1", images.httpd.config_digest[7:20]] for line in lines)
    listed = json.loads(_cli(state, "ls", "-o", "json").stdout)
    assert {i["id"] for i in listed} == {images.whiteout.config_digest, images.httpd.config_digest}
    assert _cli(state, "rm", "localhost/whiteout:v1").returncode == 0
    assert _cli(state, "ls", "-q").stdout.split() == [images.httpd.config_digest]
    p = _cli(state, "rm", "localhost/whiteout:v1")
    assert p.returncode == 1 and "not found" in p.stderr


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

"""The locally built images are valid for a real OCI tool (skopeo)."""

import json
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.skipif(not shutil.which("skopeo"),
                                reason="skopeo not installed (make install adds it)")


def _inspect(ref):
    p = subprocess.run(["skopeo", "inspect", "--config", ref], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_skopeo_reads_oci_layout(images):
    img = images.configured
    cfg = _inspect(f"oci:{img.oci_dir}:{img.spec.tag}")
    assert cfg["config"]["WorkingDir"] == "/work"
    assert cfg["rootfs"]["diff_ids"] == list(img.diff_ids)


def test_skopeo_reads_docker_archive(images):
    img = images.busybox
    cfg = _inspect(f"docker-archive:{img.docker_archive}")
    assert cfg["rootfs"]["diff_ids"] == list(img.diff_ids)


def test_skopeo_copies_oci_to_dir_verifying_digests(images, tmp_path):
    img = images.whiteout
    p = subprocess.run(["skopeo", "copy", f"oci:{img.oci_dir}:{img.spec.tag}", f"dir:{tmp_path / 'out'}"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr

"""`up --registries` (issue 18, item 3): a pod's docker.io image pulled through a mirror (Debian's
docker-registry with htpasswd on 127.0.0.1, a rewrite from library/ to private/), with the mirror's
credentials added to registries.yaml while `up` runs (re-read on change); a registries.yaml that does not
parse stops `up` at start with its path and line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e.kubelet.test_node_up import Cluster
from tests.harness.resources import unique
from tests.integration.images.registry import PASSWORD, REGISTRY_BIN, USER, Registry

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


def test_up_refuses_a_registries_file_that_does_not_parse(tmp_path):
    bad = tmp_path / "registries.yaml"
    bad.write_text("mirrors:\n  docker.io:\n    endpoint: [\"http://127.0.0.1:5000\"\n configs: {}\n")
    p = subprocess.run([sys.executable, "-m", "nodeagent", "up", "--data-dir", str(tmp_path / "d"),
                        "--registries", str(bad)], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, p
    assert f"--registries {bad}" in p.stderr and "line 4" in p.stderr, p.stderr
    assert not (tmp_path / "d").exists(), "a refused start made its data dir"


def test_up_pulls_through_a_mirror_with_auth(tmp_path, images):
    if not Path(REGISTRY_BIN).exists() or not shutil.which("skopeo"):
        pytest.skip("docker-registry and skopeo are needed (make install adds them)")
    reg = Registry(tmp_path / "registry", htpasswd=True)
    c = None
    try:
        reg.push(images.busybox.oci_dir, "latest", "private/busybox", "mirrored")
        regs = tmp_path / "registries.yaml"
        mirror = {"docker.io": {"endpoint": [f"http://{reg.host}"],
                                "rewrite": {"^library/(.*)": "private/$1"}}}
        regs.write_text(yaml.safe_dump({"mirrors": mirror}))  # no credentials yet
        data = tmp_path / "node"
        data.mkdir()
        c = Cluster(data, unique("nd"), unique("kb"))
        c.extra = ["--registries", str(regs)]
        c.start()
        mark = c.log.stat().st_size
        regs.write_text(yaml.safe_dump({"mirrors": mirror, "configs": {
            reg.host: {"auth": {"username": USER, "password": PASSWORD}}}}))
        end = time.monotonic() + 30
        while "reloaded" not in c.log.read_bytes()[mark:].decode(errors="replace"):
            assert time.monotonic() < end, c.tail()
            time.sleep(0.3)
        c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mirrored"},
                 "spec": {"terminationGracePeriodSeconds": 0,
                          "containers": [{"name": "c", "image": "busybox:mirrored",
                                          "command": ["sleep", "3600"]}]}})
        end = time.monotonic() + 90
        while True:
            pod = json.loads(c.kubectl("get", "pod", "mirrored", "-o", "json"))
            if pod["status"].get("phase") == "Running":
                break
            assert time.monotonic() < end, (pod["status"], c.tail())
            time.sleep(0.5)
        status = pod["status"]["containerStatuses"][0]
        assert status["imageID"].startswith("docker.io/library/busybox@sha256:"), status
        c.shutdown()
    finally:
        if c is not None and c.proc is not None and c.proc.poll() is None:
            c.stop()
        if c is not None:  # what a failed run left running goes too
            subprocess.run([sys.executable, "-m", "nodeagent", "reset", "--data-dir", str(c.data_dir),
                            "--bridge", c.bridge, "--grace-period", "0"], capture_output=True, timeout=120)
        reg.stop()

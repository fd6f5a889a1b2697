"""`nodeagent image build` (issue 18, item 4): a Containerfile FROM the demo busybox with RUN (a file made,
one deleted: a whiteout), COPY, ENV, WORKDIR, USER, ENTRYPOINT and CMD, built offline into a node's store,
then run as a pod that prints what the build made."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

from tests.e2e.kubelet.test_node_up import Cluster
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

CONTAINERFILE = """\
FROM localhost/busybox:latest
# RUN in the base image's own programs; the deletion becomes a whiteout in the new layer
RUN echo built > /hello && \\
    rm /var/www/index.html
COPY note.txt /srv/note.txt
ENV GREETING=hi
WORKDIR /srv
USER 1000
ENTRYPOINT ["/bin/sh", "-c"]
CMD ["cat /hello note.txt; echo $GREETING $(pwd) $(id -u); test -e /var/www/index.html || echo whiteout"]
"""


def nodeagent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodeagent", *args], capture_output=True, text=True,
                          timeout=300)


def test_a_built_image_runs_as_a_pod(tmp_path):
    if not shutil.which("podman"):
        pytest.skip("podman is needed (make install adds it)")
    store = str(tmp_path / "images")
    assert nodeagent("image", "--state-dir", store, "demo").returncode == 0
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Containerfile").write_text(CONTAINERFILE)
    (ctx / "note.txt").write_text("a note\n")
    built = nodeagent("image", "--state-dir", store, "build", "-t", "localhost/built:v1", str(ctx))
    assert built.returncode == 0, built.stderr
    assert "built localhost/built:v1 sha256:" in built.stdout
    c = Cluster(tmp_path, unique("nd"), unique("kb"))
    try:
        c.start()
        c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "built"},
                 "spec": {"restartPolicy": "Never", "containers": [
                     {"name": "c", "image": "localhost/built:v1", "imagePullPolicy": "Never"}]}})
        end = time.monotonic() + 90
        while True:
            phase = json.loads(c.kubectl("get", "pod", "built", "-o", "json"))["status"].get("phase")
            if phase in ("Succeeded", "Failed"):
                break
            assert time.monotonic() < end, (phase, c.tail())
            time.sleep(0.5)
        logs = c.kubectl("logs", "built")
        assert phase == "Succeeded", logs
        assert logs.split("\n")[:4] == ["built", "a note", "hi /srv 1000", "whiteout"], logs
        c.shutdown()
    finally:
        if c.proc is not None and c.proc.poll() is None:
            c.stop()
        nodeagent("reset", "--data-dir", str(tmp_path), "--grace-period", "0")


def test_an_unsupported_instruction_is_refused_with_its_line(tmp_path):
    (tmp_path / "Containerfile").write_text("FROM scratch\nSTOPSIGNAL SIGINT\n")
    p = nodeagent("image", "--state-dir", str(tmp_path / "images"), "build", "-t", "localhost/x:v1",
                  str(tmp_path))
    assert p.returncode == 2
    assert f"{tmp_path / 'Containerfile'}:2: STOPSIGNAL is not supported" in p.stderr

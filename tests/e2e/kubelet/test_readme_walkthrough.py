"""The README's first pod, run as written and offline (issue 18, item 4): its commands are read from the
README itself (so the walkthrough cannot rot), against a throwaway `up` whose image store gets the demo
images from `nodeagent image demo` (what `make demo-images` runs) and no registry reachable."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.kubelet.test_node_up import Cluster
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

README = Path(__file__).resolve().parents[3] / "README.md"


def walkthrough() -> list[str]:
    """The command lines of the README's "first pod with no registry" block."""
    text = README.read_text()
    m = re.search(r"A first pod with no registry.*?```sh\n(.*?)```", text, re.S)
    assert m, "the README lost its first-pod walkthrough"
    return [line for line in m.group(1).splitlines() if line.strip()]


def test_the_readme_first_pod_runs_offline(tmp_path):
    if not shutil.which("curl"):
        pytest.skip("curl is needed")
    c = Cluster(tmp_path, unique("nd"), unique("kb"))
    # no registry: every proxy points nowhere, and the images are never pulled (--image-pull-policy=Never)
    env = {**c.env, "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "*"}
    nodeagent = f"{sys.executable} -m nodeagent"
    try:
        c.start()
        outputs = []
        for line in walkthrough():
            cmd = line.replace("sudo make demo-images",
                               f"{nodeagent} image --state-dir {tmp_path / 'images'} demo")
            p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=180,
                               cwd=tmp_path)
            assert p.returncode == 0, (cmd, p.stdout, p.stderr, c.tail())
            outputs.append(p.stdout)
        text = "".join(outputs)
        assert "imported localhost/httpd:v1" in text
        assert "Running" in text
        assert "hello from busybox" in text
    finally:
        c.stop()
        subprocess.run([sys.executable, "-m", "nodeagent", "reset", "--data-dir", str(tmp_path),
                        "--grace-period", "0"], capture_output=True, timeout=120,
                       env={**os.environ})

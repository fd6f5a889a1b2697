"""The suite is green on a fresh machine: a peer's first-use state never reaches the leak check.

The host is made to look as if podman never ran (its default cgroup parent removed), then an inner
session runs the podman test with the leak check on: it must pass with nothing leaked.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import firstuse

pytestmark = [pytest.mark.root, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]


def test_first_use_artifacts_are_removable_and_podman_leaves_none():
    if not shutil.which("podman"):
        pytest.skip("podman is not installed")
    for art in firstuse.present():
        if art.what == "cgroup":
            assert firstuse.remove(art) is None, art
    assert not [a for a in firstuse.present() if a.what == "cgroup"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # the inner check fails its run on a leak but removes nothing: the outer session's check reaps
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--leak-check-no-reap",
                        "tests/integration/cni/test_podman.py"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    assert "LEAK CHECK FAILED" not in out, out
    assert p.returncode == 0 and "1 passed" in out, out
    assert not [a for a in firstuse.present() if a.what == "cgroup"], "podman left its first-use cgroups"

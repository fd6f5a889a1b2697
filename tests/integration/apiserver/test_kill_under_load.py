"""The apiserver killed -9 under a (small) density load on the etcd store, and started again.

Runs `bench/density.py --kill-apiserver` at a modest size: hollow nodes, Deployments, a ConfigMap
writer, an informer of the pods. It exits non-zero when an acknowledged Deployment or ConfigMap is
missing afterwards, when a pod is not Running, or when the informer (resumed or relisted across the
restart) differs from a final list; the test also reads its report to see the kill happened.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.testing.etcd import available

REPO = Path(__file__).resolve().parents[3]


def test_no_acknowledged_write_or_watch_event_lost_across_a_kill():
    if why := available():
        pytest.skip(why)
    p = subprocess.run([sys.executable, str(REPO / "bench/density.py"), "--stores", "etcd", "--nodes", "5",
                        "--pods-per-node", "6", "--rate", "5", "--deployment-size", "3",
                        "--kill-apiserver", "3", "--timeout", "240"],
                       capture_output=True, text=True, timeout=600, cwd=REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "server killed (SIGKILL)" in p.stdout, p.stdout
    assert "FAILED" not in p.stdout
    for check in ("acknowledged deployments present", "acknowledged configmaps present",
                  "informer view = final list (30 pods"):
        assert check in p.stdout, p.stdout

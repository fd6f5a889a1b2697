"""Plain `kubectl` works the moment `up` is ready (issue 18 item 2): `up` merges its context into the
invoking user's kubeconfig (owned by them under sudo), and `nodeagent kubectl` finds the admin
kubeconfig with no setup. Run as a new user would: a fresh HOME, no KUBECONFIG in the environment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from nodeagent.layout import Layout
from tests.e2e.kubelet.test_node_up import Cluster
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


def test_plain_kubectl_and_nodeagent_kubectl_work_at_once(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # a person's own kubeconfig, with a context of theirs that must survive
    (home / ".kube").mkdir()
    theirs = {"apiVersion": "v1", "kind": "Config", "current-context": "",
              "clusters": [{"name": "work", "cluster": {"server": "https://192.0.2.1"}}],
              "users": [{"name": "me", "user": {"token": "x"}}],
              "contexts": [{"name": "work", "context": {"cluster": "work", "user": "me"}}]}
    (home / ".kube" / "config").write_text(yaml.safe_dump(theirs))
    data = tmp_path / "up"
    data.mkdir()
    c = Cluster(data, unique("nd"), unique("kb"))
    c.extra = ["--write-kubeconfig", str(home / ".kube" / "config")]
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "SUDO_USER")}
    env["HOME"] = str(home)
    context = Layout.for_data_dir(data).kube_context
    try:
        c.start()
        assert f"kubeconfig: context '{context}' merged into {home / '.kube' / 'config'}" in c.tail(200)
        plain = subprocess.run(["kubectl", "get", "nodes", "-o", "name"], capture_output=True, text=True,
                               env=env, timeout=60)
        assert plain.returncode == 0, plain.stderr
        assert plain.stdout.strip() == f"node/{c.node}"
        merged = yaml.safe_load((home / ".kube" / "config").read_text())
        assert {x["name"] for x in merged["contexts"]} == {"work", context}
        ours = subprocess.run([sys.executable, "-m", "nodeagent", "kubectl", "get", "nodes", "-o", "name"],
                              capture_output=True, text=True, env={**env, "NODEAGENT_DATA_DIR": str(data)},
                              timeout=60)
        assert ours.returncode == 0, ours.stderr
        assert ours.stdout.strip() == f"node/{c.node}"
    finally:
        if c.proc is not None:
            c.stop()

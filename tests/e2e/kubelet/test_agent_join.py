"""`nodeagent agent --server URL --token T`: the node part alone against a separately running server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from nodeagent.testing.apiserver import start_server
from tests.e2e.kubelet.test_node_up import HTTPD, Cluster, _assert_pod_gone, _running, _wait_runtime_empty
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


def test_agent_registers_and_runs_pods_for_a_remote_server(tmp_path, images):
    srv = start_server(tmp_path / "server")
    node_dir = tmp_path / "node"
    node_dir.mkdir()
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(node_dir / "images"), "import",
                    "--no-progress", str(images.httpd.docker_archive)], check=True, capture_output=True)
    c = Cluster(node_dir, unique("nd"), unique("kb"))
    c.env["KUBECONFIG"] = str(srv.kubeconfig)
    log = node_dir / "agent.log"
    c.log = log
    with open(log, "wb") as f:
        agent = subprocess.Popen([sys.executable, "-m", "nodeagent", "agent", "--server", srv.url, "--token", srv.token,
                                  "--data-dir", str(node_dir), "--node-name", c.node, "--bridge", c.bridge],
                                 stdout=f, stderr=subprocess.STDOUT)
    c.proc = agent
    try:
        end = time.monotonic() + 60
        while "kubelet: ready" not in log.read_text(errors="replace"):
            assert agent.poll() is None and time.monotonic() < end, c.tail()
            time.sleep(0.2)
        node = json.loads(c.kubectl("get", "node", c.node, "-o", "json"))
        assert node["status"]["nodeInfo"]["kubeletVersion"]
        assert "apiserver: ready" not in log.read_text()  # the node part only
        c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "joined"},
                 "spec": {"terminationGracePeriodSeconds": 1,
                          "containers": [{"name": "httpd", "image": HTTPD, "imagePullPolicy": "Never"}]}})
        pod = c.wait_pod("joined", _running)
        assert urllib.request.urlopen(f"http://{pod['status']['podIP']}/", timeout=10).read() == b"hello from busybox\n"
        c.kubectl("delete", "pod", "joined", "--wait=true", "--timeout=60s")
        _assert_pod_gone(c, pod)
    finally:
        c.kubectl("delete", "pods", "--all", "--wait=true", "--timeout=60s", check=False)
        _wait_runtime_empty(c)
        agent.send_signal(signal.SIGINT)
        try:
            agent.wait(60)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
        srv.stop()
    assert agent.returncode == 0, c.tail()

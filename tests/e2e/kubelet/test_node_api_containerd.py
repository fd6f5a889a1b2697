"""The Node API with containerd as the runtime (`up --container-runtime-endpoint`).

containerd's streaming server speaks SPDY/3.1 and websocket v4 (no v5): kubectl 1.32's websocket exec
is refused there and kubectl falls back to SPDY, which our kubelet relays unchanged — so these tests
prove the relay is protocol-agnostic. Logs come from the CRI log files containerd writes where the
kubelet asks.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from typing import Any

import pytest

from tests.e2e.kubelet.containerd_node import containerd_up
from tests.e2e.kubelet.test_node_api import KUBECTL_120, TICKER, _lines
from tests.e2e.kubelet.test_node_up import BUSYBOX, HTTPD, _running

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def ctd_cluster(tmp_path_factory, images):
    with containerd_up(tmp_path_factory.mktemp("ctdapi"), images, 181) as (c, _):
        for name, image, cmd in (("ticker", BUSYBOX, ["sh", "-c", TICKER]), ("web", HTTPD, None)):
            ctr: dict[str, Any] = {"name": "main", "image": image, "imagePullPolicy": "Never"}
            if cmd:
                ctr["command"] = cmd
            c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                     "spec": {"terminationGracePeriodSeconds": 1, "containers": [ctr]}})
        for name in ("ticker", "web"):
            c.wait_pod(name, _running, timeout=90)
        yield c


def test_logs_and_follow_on_containerd(ctd_cluster):
    c = ctd_cluster
    time.sleep(1)
    out = c.kubectl("logs", "ticker")
    assert _lines(out, "tick")[:3] == [0, 1, 2], out
    assert len(c.kubectl("logs", "ticker", "--tail=2").splitlines()) == 2
    last = max(_lines(c.kubectl("logs", "ticker"), "tick"))
    p = subprocess.Popen(["kubectl", "logs", "-f", "ticker", "--tail=1"], stdout=subprocess.PIPE, text=True,
                         env=c.env)
    assert p.stdout is not None
    seen: list[int] = []
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end and not any(n > last + 3 for n in seen):
            line = p.stdout.readline()
            assert line
            seen += _lines(line, "tick")
    finally:
        p.kill()
        p.wait()
    assert any(n > last + 3 for n in seen)


@pytest.mark.parametrize("kubectl", ["kubectl", "1.20"])
def test_exec_on_containerd(ctd_cluster, kubectl):
    binary = "kubectl" if kubectl == "kubectl" else str(KUBECTL_120)
    if kubectl == "1.20" and not KUBECTL_120.exists():
        pytest.skip(f"kubectl 1.20 not unpacked at {KUBECTL_120} (make deps)")
    p = subprocess.run([binary, "exec", "-i", "ticker", "--", "sh", "-c", "cat; echo err >&2; exit 5"],
                       input="via containerd\n", capture_output=True, text=True,
                       env=ctd_cluster.env, timeout=60)
    assert p.stdout == "via containerd\n", p
    assert "err" in p.stderr and p.returncode == 5, p


def test_port_forward_on_containerd(ctd_cluster):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen(["kubectl", "port-forward", "pod/web", f"{port}:80"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=ctd_cluster.env)
    assert p.stdout is not None and p.stderr is not None
    try:
        line = p.stdout.readline()
        assert "Forwarding from" in line, p.stderr.read()
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read()
        assert body == b"hello from busybox\n"
    finally:
        p.kill()
        p.wait()


def test_python_exec_and_stats_on_containerd(ctd_cluster):
    from kubernetes import client, config
    from kubernetes.stream import stream

    api = config.new_client_from_config(config_file=str(ctd_cluster.data_dir / "admin.kubeconfig"))
    try:
        core = client.CoreV1Api(api)
        out = stream(core.connect_get_namespaced_pod_exec, "ticker", "default", command=["echo", "py"],
                     stderr=False, stdin=False, stdout=True, tty=False)
        assert out == "py\n"
    finally:
        api.close()
    s = json.loads(ctd_cluster.kubectl("get", "--raw",
                                       f"/api/v1/nodes/{ctd_cluster.node}/proxy/stats/summary"))
    pods = {p["podRef"]["name"]: p for p in s["pods"]}
    assert {"ticker", "web"} <= set(pods)
    ctr = pods["ticker"]["containers"][0]
    assert ctr["name"] == "main" and ctr["cpu"]["usageCoreNanoSeconds"] > 0
    assert ctr["memory"]["workingSetBytes"] > 0

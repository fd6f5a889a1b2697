"""`nodeagent agent --server URL --token T --ca-cert-hash H`: the node part alone joins a separately running
server with the join command the server printed, and runs as its own identity (a client certificate
issued through an auto-approved CSR), so NodeRestriction applies to it."""

from __future__ import annotations

import ipaddress
import json
import signal
import subprocess
import sys
import time

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from nodeagent.testing.apiserver import start_server
from tests.e2e.kubelet.test_node_up import (
    HTTPD,
    Cluster,
    _assert_pod_gone,
    _running,
    _wait_runtime_empty,
    http_body,
)
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


def _ready(node: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])


def test_agent_joins_with_the_printed_command_and_runs_pods_as_itself(tmp_path, images):
    from nodeagent.layout import instance_tag

    node_dir = tmp_path / "node"
    # the node adopts the podCIDR the server's node IPAM gives it: a range of this test's own, so its
    # bridge's subnet collides with no other instance on this host
    cluster_cidr = f"10.241.{int(instance_tag(str(node_dir))[:2], 16)}.0/24"
    srv = start_server(tmp_path / "server",
                       extra=["--cluster-cidr", cluster_cidr, "--node-cidr-mask-size", "25"])
    node_dir.mkdir()
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir",
                    str(node_dir / "images"), "import",
                    "--no-progress", str(images.httpd.docker_archive)], check=True, capture_output=True)
    c = Cluster(node_dir, unique("nd"), unique("kb"))
    c.env["KUBECONFIG"] = str(srv.kubeconfig)
    log = node_dir / "agent.log"
    c.log = log
    join = (srv.data_dir / "join-command").read_text().split()
    assert join[:2] == ["nodeagent", "agent"] and "--ca-cert-hash" in join
    with open(log, "wb") as f:
        agent = subprocess.Popen([sys.executable, "-m", "nodeagent", *join[1:], "--data-dir", str(node_dir),
                                  "--node-name", c.node,
                                  "--bridge", c.bridge], stdout=f, stderr=subprocess.STDOUT)
    c.proc = agent
    try:
        end = time.monotonic() + 90
        while "kubelet: ready" not in log.read_text(errors="replace"):
            assert agent.poll() is None and time.monotonic() < end, c.tail()
            time.sleep(0.2)
        assert "apiserver: ready" not in log.read_text()  # the node part only

        # its own identity: a client certificate for system:node:<name>, issued through an approved CSR
        node_kc = node_dir / "kubelet.kubeconfig"
        user = yaml.safe_load(node_kc.read_text())["users"][0]["user"]
        assert "token" not in user
        cert = x509.load_pem_x509_certificate(open(user["client-certificate"], "rb").read())
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{c.node}"
        assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
        csrs = json.loads(c.kubectl("get", "csr", "-o", "json"))["items"]
        assert len(csrs) == 1 and csrs[0]["spec"]["username"].startswith("system:bootstrap:")
        assert [x["type"] for x in csrs[0]["status"]["conditions"]] == ["Approved"]

        end = time.monotonic() + 60
        while not _ready(node := json.loads(c.kubectl("get", "node", c.node, "-o", "json"))):
            assert time.monotonic() < end, c.tail()
            time.sleep(0.5)
        assert node["status"]["nodeInfo"]["kubeletVersion"]

        # NodeRestriction applies to it: its own Node yes, another node no
        as_node = {**c.env, "KUBECONFIG": str(node_kc)}

        def kubectl_as_node(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run(["kubectl", *args], capture_output=True, text=True, env=as_node, timeout=60)

        other = unique("other")
        c.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Node",
                                                             "metadata": {"name": other}}))
        p = kubectl_as_node("label", "node", other, "stolen=yes")
        assert p.returncode != 0 and "Forbidden" in p.stderr
        assert f'is not allowed to modify node "{other}"' in p.stderr
        p = kubectl_as_node("delete", "node", other)
        assert p.returncode != 0 and "Forbidden" in p.stderr
        p = kubectl_as_node("label", "node", c.node, "joined=yes")
        assert p.returncode == 0, p.stderr
        p = kubectl_as_node("create", "namespace", unique("ns"))
        assert p.returncode != 0 and "Forbidden" in p.stderr
        c.kubectl("delete", "node", other)

        c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "joined"},
                 "spec": {"terminationGracePeriodSeconds": 1,
                          "containers": [{"name": "httpd", "image": HTTPD, "imagePullPolicy": "Never"}]}})
        pod = c.wait_pod("joined", _running)
        pod_cidr = json.loads(c.kubectl("get", "node", c.node, "-o", "json"))["spec"]["podCIDR"]
        pod_ip = ipaddress.ip_address(pod["status"]["podIP"])
        assert pod_ip in ipaddress.ip_network(pod_cidr), (pod_cidr, pod["status"])
        assert ipaddress.IPv4Network(pod_cidr).subnet_of(ipaddress.IPv4Network(cluster_cidr))
        assert "waiting for its spec.podCIDR" in log.read_text(errors="replace")
        assert http_body(pod["status"]["podIP"]) == b"hello from busybox\n"
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

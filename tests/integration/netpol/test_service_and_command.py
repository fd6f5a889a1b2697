"""Policy composes with netproxy's ClusterIP DNAT; `nodeagent netpol --once` / `--cleanup`;
the up component."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from netproxy.backends import make_proxier
from netproxy.proxier import NodeConfig
from netproxy.proxy import Proxy
from nodeagent.testing.netpol_lab import PolicyLab, pod_object, policy
from nodeagent.testing.netproxy_lab import endpoint_slice, service
from tests.harness.resources import JANITOR

pytestmark = [pytest.mark.root]

VIP = "10.96.0.77"


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_policy_applies_to_the_real_pod_behind_a_cluster_ip(mode, require):
    if mode == "nftables":
        require("nftables")
    c = PolicyLab(mode, nodes=1)
    JANITOR.register(f"netpol svc {id(c)}", c.close)
    try:
        c.namespace("default")
        c.add_pod("node1", "db", labels={"role": "db"}, tcp=(6379,))
        c.add_pod("node1", "frontend", labels={"role": "frontend"})
        c.add_pod("node1", "other", labels={"role": "other"})
        lab = c.labs["node1"]
        proxy = Proxy(make_proxier(mode, NodeConfig(node_name="node1", cluster_cidr=lab.cluster_cidr)),
                      c.workers[0])
        proxy.on_service(None, service("db", VIP, [{"name": "redis", "port": 80, "targetPort": 6379}]))
        proxy.on_endpoint_slice(endpoint_slice("db", [{"name": "redis", "port": 6379, "protocol": "TCP"}],
                                               [{"ip": c.ip("default/db"), "node": "node1"}]))
        proxy.set_services_synced()
        proxy.set_endpoints_synced()
        c.run(proxy.sync(full=True))
        c.sync()
        assert c.connect("default/other", (VIP, "default-db"), 80) == "ok"  # the Service works without policy
        c.apply(policy("db", "default", {
            "podSelector": {"matchLabels": {"role": "db"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "frontend"}}}],
                         "ports": [{"port": 6379}]}]}))  # the target port: policy sees the post-DNAT packet
        c.sync()
        assert c.connect("default/frontend", (VIP, "default-db"), 80) == "ok"
        assert c.connect("default/other", (VIP, "default-db"), 80) == "blocked"
        assert c.connect("default/frontend", "default/db", 6379) == "ok"
        # egress from a client, through the ClusterIP: the policy sees the backend pod, not the VIP
        c.apply(policy("frontend-out", "default", {
            "podSelector": {"matchLabels": {"role": "frontend"}}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"role": "db"}}}]}]}))
        c.sync()
        assert c.connect("default/frontend", (VIP, "default-db"), 80) == "ok"
        assert c.connect("default/frontend", "default/other") == "blocked"
        c.run(proxy.cleanup())
        c.cleanup()
        assert c.leftovers() == []
    finally:
        c.close()
        JANITOR.release(f"netpol svc {id(c)}")
    assert c.gone()


def test_help():
    out = subprocess.run([sys.executable, "-m", "nodeagent", "netpol", "--help"],
                         capture_output=True, text=True,
                         check=True).stdout
    for flag in ("--kubeconfig", "--mode", "--cleanup", "--from-file", "--netns"):
        assert flag in out


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_once_then_cleanup(res, tmp_path, mode, require):
    if mode == "nftables":
        require("nftables")
    ns = res.netns()
    manifest = tmp_path / "objs.json"
    manifest.write_text(json.dumps({"kind": "List", "items": [
        {"kind": "Namespace", "metadata": {"name": "default"}},
        pod_object("db", "default", "10.244.0.5", "n1", {"role": "db"}),
        pod_object("web", "default", "10.244.0.6", "n1", {"role": "web"}),
        policy("db", "default", {"podSelector": {"matchLabels": {"role": "db"}},
                                 "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "web"}}}]}]})
        | {"kind": "NetworkPolicy"},
    ]}))
    cli = [sys.executable, "-m", "nodeagent", "netpol", "--mode", mode, "--netns", ns]
    out = subprocess.run(cli + ["--from-file", str(manifest), "--once"], capture_output=True,
                         text=True, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["policies"] == 1 and report["pods"] == 2
    show = ["ipset", "list"] if mode == "iptables" else ["nft", "list", "ruleset"]
    rules = subprocess.run(["ip", "netns", "exec", ns, *show], capture_output=True, text=True,
                           check=True).stdout
    assert "10.244.0.5" in rules and "10.244.0.6" in rules
    out = subprocess.run(cli + ["--cleanup"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1])["left"] == []
    rules = subprocess.run(["ip", "netns", "exec", ns, *show], capture_output=True, text=True,
                           check=True).stdout
    assert "10.244.0.5" not in rules

"""Cleanup after a messy past: hooks left twice (two agents once raced in one netns) still all go.

kube-proxy --cleanup removes every copy of its jump rules; one copy left behind keeps its chain
referenced, the chain cannot be deleted, and a restore-based cleanup then fails as a whole.
"""

from __future__ import annotations

import asyncio

import pytest

from kernel.netns import NetnsWorker
from netproxy.backends import make_proxier
from netproxy.proxier import NodeConfig
from netproxy.proxy import Proxy
from nodeagent.testing.netproxy_lab import Lab, endpoint_slice, service
from tests.harness.resources import JANITOR

pytestmark = [pytest.mark.root]

TOOL = {"legacy": "iptables-legacy", "nft": "iptables-nft"}


@pytest.fixture(params=["legacy", "nft"])
def backend(request, require):
    if request.param == "nft":
        require("iptables-nft")
    return request.param


def test_cleanup_removes_duplicated_hooks(backend):
    lab = Lab()
    key = f"netproxy lab {lab.tag}"
    JANITOR.register(key, lab.close)
    worker = None
    try:
        lab.add_pod("a")
        node = NodeConfig(node_name="node-a", cluster_cidr=lab.cluster_cidr,
                          node_ips=(lab.node_ip,) if lab.node_ip else ())
        worker = NetnsWorker(lab.node)
        proxy = Proxy(make_proxier("iptables", node, backend=backend), worker)
        proxy.set_services_synced()
        proxy.set_endpoints_synced()
        proxy.on_service(None, service("web", "10.96.0.10", [{"name": "http", "port": 80, "targetPort": 8080,
                                                              "protocol": "TCP"}]))
        proxy.on_endpoint_slice(endpoint_slice("web", [{"name": "http", "port": 8080, "protocol": "TCP"}],
                                               [{"ip": lab.pods["a"], "node": "node-a"}]))
        asyncio.run(proxy.sync())
        tool = TOOL[backend]
        # a second copy of every hook from the builtin chains into ours, as a raced second agent leaves them
        for table in ("nat", "filter"):
            for line in lab.in_node(f"{tool}-save", "-t", table).splitlines():
                if line.startswith("-A ") and line.split()[1].isupper() and "-j KUBE-" in line \
                        and not line.split()[1].startswith("KUBE-"):
                    lab.in_node("sh", "-c", f"{tool} -w -t {table} {line}")
        doubled = lab.in_node(f"{tool}-save", "-t", "filter").count("-j KUBE-FORWARD")
        assert doubled == 2
        asyncio.run(proxy.cleanup())
        for table in ("nat", "filter"):
            assert "KUBE-" not in lab.in_node(f"{tool}-save", "-t", table)
    finally:
        if worker is not None:
            worker.close()
        JANITOR.release(key)
        lab.close()
        assert lab.gone(), "test namespaces left behind"

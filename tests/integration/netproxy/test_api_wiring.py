"""Services through the whole control path: apiserver → endpoints controller → netproxy rules (in a netns)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernel.iptables import backend as node_iptables_backend  # the iptables mode's backend
from nodeagent.client.rest import Client
from nodeagent.testing.apiserver import start_server
from tests.harness.resources import unique
from tests.harness.waiting import eventually

pytestmark = [pytest.mark.root, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("np-apiserver"))  # runs the endpoints controller
    yield srv
    assert srv.stop() == 0, srv.log()


async def make_pod(client, ns, name, ip, ready=True):
    pod = await client.create("pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "web"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox",
                                                   "ports": [{"name": "http", "containerPort": 8080}]}]}}, ns)
    pod["status"] = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                     "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return await client.update_status("pods", pod)


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
async def test_service_endpoints_reach_the_proxy_rules(server, res, require, mode):
    if mode == "nftables":
        require("nftables")
    client = Client.from_kubeconfig(server.kubeconfig)
    ns = unique("np").lower()
    netns = res.netns()
    proxy = None
    try:
        await client.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        svc = await client.create("services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": ns},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}}, ns)
        cluster_ip = svc["spec"]["clusterIP"]
        await make_pod(client, ns, "a", "10.244.9.11")
        await make_pod(client, ns, "b", "10.244.9.12")
        await make_pod(client, ns, "c", "10.244.9.13", ready=False)

        async def endpoints_ready():
            try:
                e = await client.get("endpoints", "web", ns)
            except Exception:
                return None
            subsets = e.get("subsets") or []
            ips = sorted(a["ip"] for s in subsets for a in s.get("addresses") or [])
            not_ready = sorted(a["ip"] for s in subsets for a in s.get("notReadyAddresses") or [])
            return ips == ["10.244.9.11", "10.244.9.12"] and not_ready == ["10.244.9.13"] and subsets
        subsets = await eventually(endpoints_ready)
        assert subsets[0]["ports"] == [{"port": 8080, "protocol": "TCP"}]  # named targetPort resolved

        async def slices_ready():  # written after the Endpoints object, in the same reconcile
            slices = (await client.list("endpointslices", ns,
                                        label_selector="kubernetes.io/service-name=web"))
            return len(slices["items"]) == 1 and len(slices["items"][0]["endpoints"]) == 3
        await eventually(slices_ready)

        proxy = res.process([sys.executable, "-m", "nodeagent", "proxy", "--mode", mode, "--kubeconfig",
                             str(server.kubeconfig), "--netns", netns, "--min-sync-period", "0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def rules() -> str:
            if mode == "iptables":
                cmd = [f"iptables-{node_iptables_backend()}-save", "-t", "nat"]
            else:
                cmd = ["nft", "list", "ruleset"]
            return subprocess.run(["ip", "netns", "exec", netns, *cmd], capture_output=True, text=True).stdout

        async def programmed():
            text = rules()
            return cluster_ip in text and "10.244.9.11" in text and "10.244.9.12" in text and text
        text = await eventually(programmed)
        assert "10.244.9.13" not in text  # not ready: no traffic
        await client.delete("pods", "a", ns, grace_period=0)

        async def removed():
            return "10.244.9.11" not in rules()
        await eventually(removed)
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(10)
        # The rules live in the test's netns, which the `res` fixture removes with them.
        await client.delete("namespaces", ns)
        await client.close()

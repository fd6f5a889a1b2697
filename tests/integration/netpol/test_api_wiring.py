"""NetworkPolicies through the whole control path: apiserver (validation, defaults) → informers →
`nodeagent netpol --kubeconfig` → sets in a test netns, following pod and namespace label changes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from nodeagent.client.rest import Client, ClientError
from nodeagent.testing.apiserver import start_server
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("netpol-apiserver"))
    yield srv
    assert srv.stop() == 0, srv.log()


async def eventually(fn, within=30.0, what=""):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        got = await fn()
        if got:
            return got
        await asyncio.sleep(0.1)
    raise AssertionError(f"not reached in {within}s: {what or fn}")


async def make_pod(client, ns, name, ip, labels, node="n1"):
    pod = await client.create("pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
                                                   "ports": [{"name": "http", "containerPort": 8080}]}]}}, ns)
    pod["status"] = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}
    return await client.update_status("pods", pod)


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
async def test_policies_pods_and_namespaces_reach_the_kernel(server, res, require, mode, tmp_path):
    if mode == "nftables":
        require("nftables")
    client = Client.from_kubeconfig(server.kubeconfig)
    ns, peer_ns = unique("np").lower(), unique("npp").lower()
    netns = res.netns()
    net = "10.244.9" if mode == "iptables" else "10.244.10"  # the other run's pods may still be terminating
    proc = None
    try:
        for node in ("n1", "n2"):  # pods bound to a node that does not exist are garbage-collected (PodGC)
            try:
                await client.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
            except ClientError as e:
                if e.code != 409:
                    raise
        await client.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        await client.create("namespaces",
                            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": peer_ns}})
        await make_pod(client, ns, "db", f"{net}.11", {"role": "db"})
        await make_pod(client, ns, "web", f"{net}.12", {"role": "web"})
        await make_pod(client, peer_ns, "client", f"{net}.13", {"app": "client"}, node="n2")
        with pytest.raises(ClientError) as bad:
            await client.create("networkpolicies", {
                "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "bad", "namespace": ns},
                "spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 80, "endPort": 70}]}]}}, ns)
        assert bad.value.code == 422
        assert bad.value.status["details"]["causes"][0]["field"] == "spec.ingress[0].ports[0].endPort"
        pol = await client.create("networkpolicies", {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "db", "namespace": ns},
            "spec": {"podSelector": {"matchLabels": {"role": "db"}},
                     "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}},
                                           {"podSelector": {"matchLabels": {"role": "frontend"}}}],
                                  "ports": [{"port": "http"}]}]}}, ns)
        assert pol["spec"]["policyTypes"] == ["Ingress"]
        assert pol["spec"]["ingress"][0]["ports"][0]["protocol"] == "TCP"

        # the child's stderr, shown on failure
        log = await asyncio.to_thread(open, tmp_path / "netpol.log", "w")
        proc = res.process([sys.executable, "-m", "nodeagent", "netpol", "--mode", mode, "--kubeconfig",
                            str(server.kubeconfig), "--netns", netns, "--node-name", "n1",
                            "--min-sync-period", "0.1"], stdout=subprocess.DEVNULL, stderr=log)

        def dump() -> str:
            cmd = ["ipset", "list"] if mode == "iptables" else ["nft", "list", "ruleset"]
            return subprocess.run(["ip", "netns", "exec", netns, *cmd], capture_output=True, text=True).stdout

        def peers(text: str) -> str:
            # the elements of the policy's one pod-peer set (NA-NP-P-<hash> in iptables mode,
            # p_<hash> in nftables)
            blocks = text.split("Name: ") if mode == "iptables" else text.split("set ")
            return "".join(b for b in blocks
                           if b.split() and b.split()[0].lower().startswith(("na-np-p-", "p_")))

        async def programmed():
            t = dump()
            return f"{net}.11" in t and ("8080" in t) and t
        text = await eventually(programmed, what="db and its named port programmed")
        assert f"{net}.12" not in peers(text) and f"{net}.13" not in peers(text)
        # a pod label change: web becomes a frontend
        web = await client.get("pods", "web", ns)
        web["metadata"]["labels"] = {"role": "frontend"}
        await client.update("pods", web, ns)
        await eventually(lambda: asyncio.sleep(0, f"{net}.12" in peers(dump())), what="pod label change")
        # a namespace label change: the other namespace's pod becomes a peer
        pns = await client.get("namespaces", peer_ns)
        pns["metadata"].setdefault("labels", {})["team"] = "a"
        await client.update("namespaces", pns)
        await eventually(lambda: asyncio.sleep(0, f"{net}.13" in peers(dump())),
                         what="namespace label change")
        await client.delete("networkpolicies", "db", ns)
        await eventually(lambda: asyncio.sleep(0, f"{net}.13" not in dump() and f"{net}.12" not in dump()),
                         what="policy deleted")
        assert ("NA-NP-ING-ISO" if mode == "iptables" else "ing_iso") in dump()
        proc.terminate()  # SIGTERM: the command removes what it wrote
        assert proc.wait(10) == 0
        leftover = dump()
        assert "NA-NP-" not in leftover and "nodeagent-netpol" not in leftover, leftover
    except BaseException:
        print((tmp_path / "netpol.log").read_text() if (tmp_path / "netpol.log").exists() else "no log")
        raise
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
            log.close()
        for n in (ns, peer_ns):
            await client.delete("namespaces", n)
        await client.close()


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
async def test_up_component_serves_then_removes_its_rules_on_stop(server, res, require, mode, tmp_path):
    """`netpol.service:serve` as `nodeagent up` runs it (kubeconfig,
    tagged names for a non-default data dir)."""
    from netpol.config import NetpolConfig
    from netpol.iptables import IptablesBackend
    from netpol.nftables import NftablesBackend
    from netpol.service import backend_for, serve
    from nodeagent.client.config import Credentials
    from nodeagent.layout import Layout

    if mode == "nftables":
        require("nftables")
    netns = res.netns()
    layout = Layout.for_data_dir(tmp_path)
    config = NetpolConfig(chain_prefix=layout.netpol_chain_prefix, set_prefix=layout.netpol_set_prefix,
                          table=layout.netpol_table, mode=mode, node_name="n1", netns=netns,
                          credentials=Credentials(kubeconfig=str(server.kubeconfig)))
    names = backend_for(config)
    if isinstance(names, IptablesBackend):
        mark, cmd = names.cp, [f"{names.cmd}-save", "-t", "filter"]
    else:
        assert isinstance(names, NftablesBackend), names
        mark, cmd = names.table, ["nft", "list", "tables"]

    def dump() -> str:
        return subprocess.run(["ip", "netns", "exec", netns, *cmd], capture_output=True, text=True).stdout

    ready = asyncio.Event()
    task = asyncio.create_task(serve(config, ready))
    await asyncio.wait_for(ready.wait(), 30)
    assert mark in await asyncio.to_thread(dump)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert mark not in await asyncio.to_thread(dump)

"""`nodeagent proxy --once` / `--cleanup` against a test network namespace."""

import json
import subprocess
import sys

import pytest

from kernel.iptables import backend as node_iptables_backend  # the iptables mode's backend
from nodeagent.testing.netproxy_lab import endpoint_slice, service

pytestmark = pytest.mark.root


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_proxy_once_then_cleanup(res, tmp_path, mode, require):
    if mode == "nftables":
        require("nftables")
    ns = res.netns()
    manifest = tmp_path / "objs.json"
    manifest.write_text(json.dumps({"kind": "List", "items": [
        service("web", "10.96.0.10", [{"name": "http", "port": 80}]),
        endpoint_slice("web", [{"name": "http", "port": 8080}], [{"ip": "10.244.0.5"}]),
    ]}))
    cli = [sys.executable, "-m", "nodeagent", "proxy", "--mode", mode, "--netns", ns]
    out = subprocess.run(cli + ["--from-file", str(manifest), "--once"], capture_output=True,
                         text=True, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["services"] == 1 and report["rules"] > 0
    if mode == "iptables":
        show = [f"iptables-{node_iptables_backend()}-save", "-t", "nat"]
    else:
        show = ["nft", "list", "ruleset"]
    rules = subprocess.run(["ip", "netns", "exec", ns, *show], capture_output=True, text=True,
                           check=True).stdout
    # iptables: the DNAT target; nftables: the Service's endpoint-map element (slot 0 → ip . port)
    endpoint = "10.244.0.5:8080" if mode == "iptables" else "10.96.0.10 . tcp . 80 . 0 : 10.244.0.5 . 8080"
    assert endpoint in rules
    subprocess.run(cli + ["--cleanup"], capture_output=True, text=True, check=True)
    rules = subprocess.run(["ip", "netns", "exec", ns, *show], capture_output=True, text=True,
                           check=True).stdout
    assert "10.244.0.5" not in rules and "KUBE-" not in rules and "kube-proxy" not in rules


def test_serve_component_syncs_from_a_source_then_stops(res):
    import asyncio

    from netproxy.config import ProxyConfig
    from netproxy.service import StaticSource, serve

    ns = res.netns()
    source = StaticSource([service("web", "10.96.0.10", [{"name": "http", "port": 80}])],
                          [endpoint_slice("web", [{"name": "http", "port": 8080}], [{"ip": "10.244.0.5"}])])
    config = ProxyConfig(node_name="n1", mode="iptables", netns=ns, min_sync_period=0.0)

    async def scenario():
        ready = asyncio.Event()
        task = asyncio.create_task(serve(config, ready, source))
        await asyncio.wait_for(ready.wait(), 20)
        rules = await asyncio.to_thread(subprocess.run,
                                        ["ip", "netns", "exec", ns,
                                         f"iptables-{node_iptables_backend()}-save"],
                                        capture_output=True, text=True)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return rules.stdout

    assert "10.244.0.5:8080" in asyncio.run(scenario())

"""`nodeagent server` runs the controllers itself,
configured by its flags (no in-process controllers here)."""

from __future__ import annotations

import pytest

from nodeagent.client.rest import Client
from nodeagent.testing.apiserver import start_server
from nodeagent.testing.hollow import node_object
from tests.harness.resources import unique
from tests.harness.waiting import eventually

pytestmark = pytest.mark.slow


async def test_server_flags_reach_ipam_and_node_lifecycle(tmp_path):
    srv = start_server(tmp_path / "srv", extra=[
        "--cluster-cidr", "10.77.0.0/16", "--node-cidr-mask-size", "26",
        "--node-monitor-period", "0.5", "--node-monitor-grace-period", "2", "--controllers", "*,-podgc"])
    try:
        async with Client.from_kubeconfig(srv.kubeconfig) as client:
            name = unique("srvnode").lower()
            await client.create("nodes", node_object(name))  # registers once, never heartbeats

            async def cidr():
                return (await client.get("nodes", name))["spec"].get("podCIDR")
            assert (await eventually(cidr)).startswith("10.77.") and (await cidr()).endswith("/26")

            async def unknown():
                n = await client.get("nodes", name)
                ready = next(c for c in n["status"]["conditions"] if c["type"] == "Ready")
                return ready["status"] == "Unknown" and any(
                    x["key"] == "node.kubernetes.io/unreachable" for x in n["spec"].get("taints") or [])
            await eventually(unknown, within=30)
            await client.delete("nodes", name)
    finally:
        assert srv.stop() == 0, srv.log()

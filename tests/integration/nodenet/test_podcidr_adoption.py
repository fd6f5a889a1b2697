"""The agent's pod network adopts its Node's spec.podCIDR from a real server: the node registers, the
server's node IPAM (--cluster-cidr) assigns the podCIDR, and the CNI config is written from it; with
--no-allocate-node-cidrs it waits until something else assigns one."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from nodeagent.client.rest import Client
from nodeagent.layout import Layout
from nodeagent.nodenet.network import PodNetwork
from nodeagent.nodenet.podcidr import PodCIDRFollower
from nodeagent.testing.apiserver import start_server
from nodeagent.testing.hollow import node_object
from tests.harness.resources import unique
from tests.harness.waiting import eventually

pytestmark = pytest.mark.slow


def _subnet_in(conf) -> str | None:
    if not conf.exists():
        return None
    return json.loads(conf.read_text())["plugins"][0]["ipam"]["ranges"][0][0]["subnet"]


@pytest.mark.parametrize("allocate", [True, False], ids=["node-ipam", "no-allocate-node-cidrs"])
async def test_the_cni_config_is_written_from_the_podcidr_the_control_plane_assigns(
        tmp_path, allocate, caplog, monkeypatch):
    from nodeagent.nodenet import podcidr

    monkeypatch.setattr(podcidr, "WAIT_LOG_EVERY", 0.2)  # say "still waiting" often in this test
    caplog.set_level("INFO", logger="nodeagent.nodenet.podcidr")
    srv = start_server(tmp_path / "srv", extra=["--cluster-cidr", "10.123.0.0/16",
                                                "--node-cidr-mask-size", "25",
                                                 *([] if allocate else ["--no-allocate-node-cidrs"])])
    name = unique("pcidr").lower()
    layout = Layout.for_data_dir(tmp_path / "node")
    net = PodNetwork(layout.network_name, layout.bridge, None, layout.cni_conf_dir, layout.cni_ipam_dir)
    conf = tmp_path / "node" / "cni" / "net.d" / "10-nodeagent.conflist"
    follower = PodCIDRFollower(net, name)
    try:
        async with Client.from_kubeconfig(srv.kubeconfig) as client:
            started = asyncio.Event()
            task = asyncio.create_task(follower.run(client, started))
            try:
                await started.wait()
                await client.create("nodes", node_object(name))  # the kubelet registers
                if allocate:
                    subnet = await eventually(lambda: asyncio.sleep(0, follower.subnet))
                else:
                    # the follower has seen the Node, without a podCIDR: it writes nothing
                    await eventually(lambda: asyncio.sleep(0, follower.registered))
                    # and says what it waits for
                    await eventually(lambda: asyncio.sleep(0,
                                                           "(registered): still waiting for its spec.podCIDR"
                                                           in caplog.text))
                    assert (await client.get("nodes", name))["spec"].get("podCIDR") is None
                    assert _subnet_in(conf) is None
                    # another IPAM (or an admin) assigns it
                    await client.patch("nodes", name, {"spec": {"podCIDR": "10.77.7.0/24",
                                                                "podCIDRs": ["10.77.7.0/24"]}})
                    subnet = await eventually(lambda: asyncio.sleep(0, follower.subnet))
                    assert subnet == "10.77.7.0/24"
                node = await client.get("nodes", name)
                assert subnet == node["spec"]["podCIDR"] and _subnet_in(conf) == subnet
                if allocate:
                    assert subnet.startswith("10.123.") and subnet.endswith("/25")
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        assert srv.stop() == 0, srv.log()

"""The CNI invoker against Debian's reference plugins (bridge, host-local, loopback), and pods on it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from cni.invoke import CNI, Attachment, CNIError
from tests.harness.resources import unique

pytestmark = pytest.mark.root

PLUGINS = "/usr/lib/cni"


def conflist(bridge: str, subnet: str, data_dir: Path) -> dict:
    return {
        "cniVersion": "1.0.0",
        "name": f"net-{bridge}",
        "plugins": [
            {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False,
             "ipam": {"type": "host-local", "dataDir": str(data_dir), "ranges": [[{"subnet": subnet}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
        ],
    }


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False).stdout


@pytest.fixture
def network(tmp_path):
    bridge = unique("br")
    conf_dir = tmp_path / "net.d"
    conf_dir.mkdir()
    doc = conflist(bridge, f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}.0/24", tmp_path / "ipam")
    (conf_dir / "10-test.conflist").write_text(json.dumps(doc))
    (conf_dir / "99-ignored.conflist").write_text(json.dumps({**doc, "name": "second"}))
    try:
        yield conf_dir, bridge, tmp_path
    finally:
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)


def test_add_check_del_with_reference_plugins(network, res):
    conf_dir, bridge, tmp = network
    netns = res.netns()
    cni = CNI(conf_dir, [PLUGINS], tmp / "cache")
    att = Attachment("ctr-1", f"/run/netns/{netns}", "eth0", (("K8S_POD_NAME", "x"), ("IgnoreUnknown", "1")))

    async def scenario() -> dict:
        result = await cni.add(att)
        await cni.check(att)
        return result

    result = asyncio.run(scenario())
    network = cni.network()
    assert network and network.name == f"net-{bridge}"  # the first file by name wins
    addr = result["ips"][0]["address"].split("/")[0]
    assert addr in ip("-n", netns, "addr", "show", "eth0")
    cache = tmp / "cache" / "results" / f"net-{bridge}-ctr-1-eth0"
    assert json.loads(cache.read_text())["result"]["ips"][0]["address"].startswith(addr)
    assert (tmp / "ipam" / f"net-{bridge}" / addr).exists()

    # DEL uses the cached config even after the conf dir changed
    for f in conf_dir.iterdir():
        f.unlink()
    asyncio.run(cni.delete(att))
    assert "eth0" not in ip("-n", netns, "link")
    assert not (tmp / "ipam" / f"net-{bridge}" / addr).exists()
    assert not cache.exists()
    asyncio.run(cni.delete(att))  # idempotent


def test_del_after_netns_is_gone_still_releases(network, res):
    conf_dir, bridge, tmp = network
    name = unique("ns")
    subprocess.run(["ip", "netns", "add", name], check=True)
    cni = CNI(conf_dir, [PLUGINS], tmp / "cache")
    att = Attachment("ctr-2", f"/run/netns/{name}")
    result = asyncio.run(cni.add(att))
    addr = result["ips"][0]["address"].split("/")[0]
    subprocess.run(["ip", "netns", "del", name], check=True)
    asyncio.run(cni.delete(att))
    assert not (tmp / "ipam" / f"net-{bridge}" / addr).exists()


def test_plugin_errors_are_typed(tmp_path, res):
    conf_dir = tmp_path / "net.d"
    conf_dir.mkdir()
    bridge = unique("br")
    (conf_dir / "10-bad.conflist").write_text(json.dumps(
        {"cniVersion": "1.0.0", "name": "bad",
         "plugins": [{"type": "bridge", "bridge": bridge, "ipam": {"type": "no-such-ipam"}}]}))
    cni = CNI(conf_dir, [PLUGINS], tmp_path / "cache")
    with pytest.raises(CNIError) as e:
        asyncio.run(cni.add(Attachment("ctr-3", f"/run/netns/{res.netns()}")))
    assert "no-such-ipam" in str(e.value)
    missing = CNI(conf_dir, [str(tmp_path)], tmp_path / "cache")
    with pytest.raises(CNIError) as e:
        asyncio.run(missing.add(Attachment("ctr-4", "/proc/self/ns/net")))
    assert "failed to find plugin" in str(e.value)
    subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)


def test_pod_on_a_cni_network(cri, pods, tmp_path):
    bridge = unique("br")
    doc = conflist(bridge, f"10.{150 + os.getpid() % 40}.{os.getpid() % 250}.0/24", tmp_path / "ipam")
    conf = cri.cni_conf / "10-pods.conflist"
    conf.write_text(json.dumps(doc))
    c = cri.client
    try:
        conds = {x.type: x.status for x in c.status().status.conditions}
        assert conds["NetworkReady"] is True
        sid, scfg = pods.run()
        pod_ip = c.pod_sandbox_status(sid).status.network.ip
        assert pod_ip.startswith("10.")
        cid = pods.container(sid, scfg, ["sleep", "300"])
        out = c.exec_sync(cid, ["ip", "-4", "addr", "show", "eth0"]).stdout.decode()
        assert pod_ip in out
        ping = subprocess.run(["busybox", "ping", "-c", "1", "-W", "2", pod_ip], capture_output=True)
        assert ping.returncode == 0
        hosts = c.exec_sync(cid, ["cat", "/etc/hosts"]).stdout.decode()
        assert f"{pod_ip}\t{scfg.hostname}" in hosts
        c.stop_pod_sandbox(sid)
        assert not (tmp_path / "ipam" / f"net-{bridge}" / pod_ip).exists()
        assert not list((cri.state / "cni-cache" / "results").glob(f"*{sid}*"))
    finally:
        conf.unlink()
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)

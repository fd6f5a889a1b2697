"""bridge options on the real kernel: mtu, promiscMode, hairpinMode, isDefaultGateway, dual stack, vlan."""

from __future__ import annotations

import json
import os
import secrets
import subprocess

import pytest

from tests.integration.cni.conftest import in_ns, netns_path, ping
from tests.integration.cni.invoker import PluginError

pytestmark = pytest.mark.root


def link(ns: str | None, name: str) -> dict:
    argv = ["ip", "-j", "-d", "link", "show", name]
    if ns:
        out = in_ns(ns, *argv).stdout
    else:
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]


def test_mtu_promisc_hairpin_default_gateway_dual_stack(runtime, net, res):
    conf = net.conf(mtu=1400, promiscMode=True, isDefaultGateway=True)
    conf["ipam"]["ranges"].append([{"subnet": f"fd00:{secrets.token_hex(2)}:{secrets.token_hex(2)}::/64"}])
    conf["ipam"]["routes"] = []
    a, b = res.netns(), res.netns()
    ra = runtime.call("nodeagent-bridge", "ADD", conf, cid="oa", netns=netns_path(a))
    rb = runtime.call("nodeagent-bridge", "ADD", conf, cid="ob", netns=netns_path(b))
    fams = sorted(":" in i["address"] for i in ra["ips"])
    assert fams == [False, True]
    host = ra["interfaces"][1]["name"]
    assert link(a, "eth0")["mtu"] == 1400 and link(None, host)["mtu"] == 1400
    assert "PROMISC" in link(None, net.bridge)["flags"]
    with open(f"/sys/class/net/{host}/brport/hairpin_mode") as f:
        assert f.read().strip() == "1"
    routes4 = in_ns(a, "ip", "route").stdout
    routes6 = in_ns(a, "ip", "-6", "route").stdout
    gw6 = next(i["gateway"] for i in ra["ips"] if ":" in i["address"])
    assert f"default via {net.gateway}" in routes4 and f"default via {gw6}" in routes6
    v6_b = next(i["address"] for i in rb["ips"] if ":" in i["address"]).split("/")[0]
    assert ping(a, next(i["address"] for i in rb["ips"] if ":" not in i["address"]).split("/")[0])
    addrs = in_ns(a, "ip", "-6", "addr", "show", "eth0").stdout
    assert next(i["address"] for i in ra["ips"] if ":" in i["address"]) in addrs and v6_b
    six = subprocess.run(["ip6tables-save", "-t", "nat"], capture_output=True, text=True).stdout
    assert f"net={net.name} " in six  # the v6 subnet is masqueraded too
    for cid, ns in (("oa", a), ("ob", b)):
        runtime.call("nodeagent-bridge", "DEL", conf, cid=cid, netns=netns_path(ns))
    net.assert_clean()


def _kernel_has_bridge_vlan_filtering(res) -> bool:
    br = res.bridge()
    return os.path.exists(f"/sys/class/net/{br}/bridge/vlan_filtering")


def test_vlan_tags_the_port(runtime, net, res):
    conf = net.conf(vlan=100, isGateway=False, ipMasq=False)
    ns = res.netns()
    if not _kernel_has_bridge_vlan_filtering(res):
        with pytest.raises(PluginError) as e:  # said plainly, as the spec's "unsupported field"
            runtime.call("nodeagent-bridge", "ADD", conf, cid="v1", netns=netns_path(ns))
        assert e.value.code == 2 and "VLAN filtering" in e.value.out["msg"]
        net.assert_clean()
        pytest.skip("this kernel lacks CONFIG_BRIDGE_VLAN_FILTERING: the plugin refuses vlan with code 2")
    r = runtime.call("nodeagent-bridge", "ADD", conf, cid="v1", netns=netns_path(ns))
    host = r["interfaces"][1]["name"]
    with open(f"/sys/class/net/{net.bridge}/bridge/vlan_filtering") as f:
        assert f.read().strip() == "1"
    shown = json.loads(subprocess.run(["bridge", "-j", "vlan", "show", "dev", host], capture_output=True,
                                      text=True, check=True).stdout)
    vlans = shown[0]["vlans"]
    assert [v["vlan"] for v in vlans] == [100]
    assert {"PVID", "Egress Untagged"} <= set(vlans[0]["flags"])
    runtime.call("nodeagent-bridge", "DEL", conf, cid="v1", netns=netns_path(ns))
    net.assert_clean()
    assert not os.path.exists(f"/sys/class/net/{host}")

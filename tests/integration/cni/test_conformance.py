"""Every verb and error code of our plugins, exec'd exactly as a runtime calls them."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.integration.cni.conftest import in_ns, netns_path
from tests.integration.cni.invoker import PluginError

pytestmark = pytest.mark.root
OURS = ("nodeagent-bridge", "nodeagent-host-local", "nodeagent-portmap")


@pytest.mark.parametrize("plugin", OURS)
def test_version(runtime, plugin):
    out = runtime.call(plugin, "VERSION", {"cniVersion": "0.4.0"})
    assert out["cniVersion"] == "0.4.0"
    assert {"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} <= set(out["supportedVersions"])


@pytest.mark.parametrize("plugin", OURS)
def test_error_codes(runtime, net, res, plugin):
    ns = netns_path(res.netns())
    conf = net.conf(plugin=plugin)

    def code(stdin, **kw):
        with pytest.raises(PluginError) as e:
            runtime.call(plugin, kw.pop("command", "ADD"), stdin, **kw)
        assert e.value.rc == 1 and e.value.out["msg"]
        return e.value.code

    assert code(conf, cid="", netns=ns) == 4                           # CNI_CONTAINERID missing
    assert code(conf, cid="a b", netns=ns) == 4                        # invalid container id
    assert code(conf, cid="c1", netns=ns, command="FROB") == 4         # unknown verb
    assert code(b"{nope", cid="c1", netns=ns) == 6                     # undecodable config
    assert code(dict(conf, cniVersion="0.2.0"), cid="c1", netns=ns) == 1
    assert code(dict(conf, name="no spaces"), cid="c1", netns=ns) == 7
    assert code(conf, command="GC") == 1                               # GC needs 1.1.0
    # CHECK needs prevResult; host-local checks its own store, where c1 holds nothing
    assert code(conf, cid="c1", netns=ns, command="CHECK") == (999 if plugin == "nodeagent-host-local" else 7)
    assert net.allocations() == [] and net.veths() == []


def test_bridge_specific_errors(runtime, net, res):
    ns = netns_path(res.netns())
    with pytest.raises(PluginError) as e:
        runtime.call("nodeagent-bridge", "ADD", net.conf(), cid="c1", netns="/run/netns/absent-ns")
    assert e.value.code == 3
    with pytest.raises(PluginError) as e:
        runtime.call("nodeagent-bridge", "ADD", net.conf(vlanTrunk=[{"id": 5}]), cid="c1", netns=ns)
    assert e.value.code == 2
    small = net.conf()
    small["ipam"]["ranges"] = [[{"subnet": str(net.subnet), "rangeStart": str(net.subnet[5]),
                                 "rangeEnd": str(net.subnet[5])}]]
    runtime.call("nodeagent-bridge", "ADD", small, cid="c1", netns=ns)
    ns2 = netns_path(res.netns())
    with pytest.raises(PluginError) as e:
        runtime.call("nodeagent-bridge", "ADD", small, cid="c2", netns=ns2)
    assert e.value.code == 999 and "no IP addresses available" in e.value.out["msg"]
    assert net.allocations() == [str(net.subnet[5])]
    assert len(net.veths()) == 1  # the failed ADD undid its veth
    runtime.call("nodeagent-bridge", "DEL", small, cid="c1", netns=ns)
    net.assert_clean()


@pytest.mark.parametrize("version", ["0.3.1", "0.4.0", "1.0.0", "1.1.0"])
def test_add_check_del_result_shape(runtime, net, res, version):
    ns = res.netns()
    conf = net.conf(version=version)
    r = runtime.call("nodeagent-bridge", "ADD", conf, cid="c1", netns=netns_path(ns))
    assert r["cniVersion"] == version
    names = [i["name"] for i in r["interfaces"]]
    assert names[0] == net.bridge and names[2] == "eth0" and r["interfaces"][2]["sandbox"] == netns_path(ns)
    ip = r["ips"][0]
    assert ip["interface"] == 2 and ip["gateway"] == net.gateway
    assert ("version" in ip) == (version < "1.0.0")
    assert r["routes"] == [{"dst": "0.0.0.0/0"}]
    shown = in_ns(ns, "ip", "-j", "addr", "show", "eth0").stdout
    assert ip["address"].split("/")[0] in shown
    link = json.loads(in_ns(ns, "ip", "-j", "link", "show", "eth0").stdout)[0]
    assert link["address"] == r["interfaces"][2]["mac"]
    assert "default via " + net.gateway in in_ns(ns, "ip", "route").stdout
    assert len(net.rules()) == 3  # the network's POSTROUTING jump and its chain's two rules

    conf_prev = dict(conf, prevResult=r)
    if version >= "0.4.0":
        runtime.call("nodeagent-bridge", "CHECK", conf_prev, cid="c1", netns=netns_path(ns))
        jump = next(r for r in net.rules() if r.startswith("-A POSTROUTING"))
        subprocess.run(["iptables-restore", "--noflush"], input=f"*nat\n-D{jump[2:]}\nCOMMIT\n", text=True,
                       check=True)
        with pytest.raises(PluginError) as e:
            runtime.call("nodeagent-bridge", "CHECK", conf_prev, cid="c1", netns=netns_path(ns))
        assert "masquerade" in e.value.out["msg"]
        runtime.call("nodeagent-bridge", "ADD", conf, cid="c1", netns=netns_path(ns))  # ADD repairs it
        runtime.call("nodeagent-bridge", "CHECK", conf_prev, cid="c1", netns=netns_path(ns))
        in_ns(ns, "ip", "addr", "flush", "dev", "eth0")
        with pytest.raises(PluginError) as e:
            runtime.call("nodeagent-bridge", "CHECK", conf_prev, cid="c1", netns=netns_path(ns))
        assert e.value.code == 3
    runtime.call("nodeagent-bridge", "DEL", conf_prev, cid="c1", netns=netns_path(ns))
    net.assert_clean()
    assert "eth0" not in in_ns(ns, "ip", "link").stdout
    runtime.call("nodeagent-bridge", "DEL", conf_prev, cid="c1", netns=netns_path(ns))  # idempotent


def test_del_when_netns_and_state_are_gone(runtime, net, res):
    ns = res.netns()
    r = runtime.call("nodeagent-bridge", "ADD", net.conf(), cid="c1", netns=netns_path(ns))
    subprocess.run(["ip", "netns", "del", ns], check=True)  # the kernel drops the pair with the netns
    runtime.call("nodeagent-bridge", "DEL", net.conf(), cid="c1", netns=netns_path(ns))  # no prevResult
    net.assert_clean()
    runtime.call("nodeagent-bridge", "DEL", dict(net.conf(), prevResult=r), cid="c1", netns=netns_path(ns))
    runtime.call("nodeagent-bridge", "DEL", net.conf(), cid="never-added", netns="")
    net.assert_clean()


def test_add_twice_is_idempotent(runtime, net, res):
    ns = netns_path(res.netns())
    r1 = runtime.call("nodeagent-bridge", "ADD", net.conf(), cid="c1", netns=ns)
    r2 = runtime.call("nodeagent-bridge", "ADD", net.conf(), cid="c1", netns=ns)
    assert r1["ips"] == r2["ips"]
    assert len(net.veths()) == 1 and len(net.allocations()) == 1 and len(net.rules()) == 3
    runtime.call("nodeagent-bridge", "DEL", net.conf(), cid="c1", netns=ns)
    net.assert_clean()


def test_gc_frees_everything_not_valid(runtime, net, res):
    conf = net.conf(version="1.1.0")
    nss = [netns_path(res.netns()) for _ in range(3)]
    results = [runtime.call("nodeagent-bridge", "ADD", conf, cid=f"c{i}", netns=ns)
               for i, ns in enumerate(nss)]
    assert len(net.allocations()) == 3 and len(net.veths()) == 3
    runtime.call("nodeagent-bridge", "GC", dict(conf, **{"cni.dev/valid-attachments": [
        {"containerID": "c1", "ifname": "eth0"}]}))
    assert net.allocations() == [results[1]["ips"][0]["address"].split("/")[0]]
    assert len(net.veths()) == 1 and len(net.rules()) == 3
    runtime.call("nodeagent-bridge", "CHECK", dict(conf, prevResult=results[1]), cid="c1", netns=nss[1])
    runtime.call("nodeagent-bridge", "GC", dict(conf, **{"cni.dev/valid-attachments": []}))
    net.assert_clean()


def test_status(runtime, net, tmp_path):
    conf = net.conf(version="1.1.0")
    assert runtime.call("nodeagent-bridge", "STATUS", conf) is None
    assert runtime.call("nodeagent-host-local", "STATUS", conf) is None
    blocker = tmp_path / "file"
    blocker.write_text("x")
    conf["ipam"]["dataDir"] = str(blocker / "sub")
    with pytest.raises(PluginError) as e:
        runtime.call("nodeagent-bridge", "STATUS", conf)
    assert e.value.code == 50


def test_bridge_falls_back_in_process_when_no_daemon_listens(cni_bin, net, res, tmp_path):
    """A missing socket, and a stale one (a daemon that died), both mean: run in-process."""
    import socket as _socket

    from tests.integration.cni.invoker import Runtime

    stale = str(tmp_path / "stale.sock")
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.bind(stale)
    s.close()  # the file stays, nobody listens: ECONNREFUSED
    for path in (str(tmp_path / "absent.sock"), stale):
        rt = Runtime([str(cni_bin)], {"NODEAGENT_CNI_SOCKET": path})
        ns = netns_path(res.netns())
        r = rt.call("nodeagent-bridge", "ADD", net.conf(), cid="fb", netns=ns)
        assert r["ips"] and len(net.veths()) == 1
        rt.call("nodeagent-bridge", "DEL", dict(net.conf(), prevResult=r), cid="fb", netns=ns)
        net.assert_clean()


def test_daemon_and_in_process_give_the_same_answers(cni_bin, cni_daemon, net, res):
    import sys

    from tests.integration.cni.invoker import Runtime

    second = subprocess.run([os.path.join(os.path.dirname(sys.executable), "nodeagent"), "cni-daemon",
                             "--socket", cni_daemon], capture_output=True, text=True, timeout=60)
    assert second.returncode == 1 and "already serves" in second.stderr  # never two daemons on one socket

    via = Runtime([str(cni_bin)], {"NODEAGENT_CNI_SOCKET": cni_daemon})
    ns = netns_path(res.netns())
    for stdin, code in ((b"{nope", 6), (json.dumps(dict(net.conf(), cniVersion="0.1.0")).encode(), 1)):
        with pytest.raises(PluginError) as e:
            via.call("nodeagent-bridge", "ADD", stdin, cid="d1", netns=ns)
        assert e.value.code == code
    r = via.call("nodeagent-bridge", "ADD", net.conf(version="1.1.0"), cid="d1", netns=ns)
    via.call("nodeagent-bridge", "CHECK", dict(net.conf(version="1.1.0"), prevResult=r), cid="d1", netns=ns)
    via.call("nodeagent-bridge", "GC", dict(net.conf(version="1.1.0"), **{"cni.dev/valid-attachments": []}))
    net.assert_clean()
    assert via.call("nodeagent-bridge", "STATUS", net.conf(version="1.1.0")) is None


def test_conflist_gc_with_portmap(runtime, net, res):
    """GC through a chained conflist: stale attachments lose veth, address, host ports and masquerade."""
    conflist = net.conflist({"type": "nodeagent-portmap", "capabilities": {"portMappings": True}},
                            version="1.1.0")
    pods = {}
    for i in range(2):
        ns = netns_path(res.netns())
        rc = {"portMappings": [{"hostPort": 41000 + i, "containerPort": 80, "protocol": "tcp"}]}
        pods[f"g{i}"] = runtime.add_list(conflist, f"g{i}", ns, runtime_config=rc)
    assert sum("nodeagent/portmap" in r for r in net.rules()) > 0
    runtime.gc_list(conflist, [{"containerID": "g1", "ifname": "eth0"}])
    portmap_ids = {r.split(" id=")[1].split()[0] for r in net.rules() if "nodeagent/portmap" in r}
    assert portmap_ids == {"g1"}
    assert len(net.veths()) == 1 and len(net.allocations()) == 1
    runtime.gc_list(conflist, [])
    net.assert_clean()

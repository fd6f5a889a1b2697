"""Our plugins with Debian's reference plugins, both ways, and in a real chained conflist."""

from __future__ import annotations

import contextlib
import os
import subprocess

import pytest

from tests.integration.cni import netutil
from tests.integration.cni.conftest import netns_path, ping

pytestmark = pytest.mark.root


def test_our_bridge_with_reference_host_local(runtime, net, res):
    a, b = res.netns(), res.netns()
    conf = net.conf(ipam="host-local")
    ra = runtime.call("nodeagent-bridge", "ADD", conf, cid="ia", netns=netns_path(a))
    rb = runtime.call("nodeagent-bridge", "ADD", conf, cid="ib", netns=netns_path(b))
    assert ra["ips"][0]["address"] != rb["ips"][0]["address"]
    assert ping(a, rb["ips"][0]["address"].split("/")[0])
    assert len(net.allocations()) == 2  # written by the reference host-local, same layout as ours
    runtime.call("nodeagent-bridge", "CHECK", dict(conf, prevResult=ra), cid="ia", netns=netns_path(a))
    for cid, ns, r in (("ia", a, ra), ("ib", b, rb)):
        runtime.call("nodeagent-bridge", "DEL", dict(conf, prevResult=r), cid=cid, netns=netns_path(ns))
    net.assert_clean()


def test_reference_bridge_with_our_host_local(runtime, net, res):
    a, b = res.netns(), res.netns()
    conf = net.conf(plugin="bridge")
    ra = runtime.call("bridge", "ADD", conf, cid="ra", netns=netns_path(a))
    rb = runtime.call("bridge", "ADD", conf, cid="rb", netns=netns_path(b))
    assert ping(a, rb["ips"][0]["address"].split("/")[0]) and ping(b, net.gateway)
    assert len(net.allocations()) == 2
    runtime.call("bridge", "CHECK", dict(conf, prevResult=ra), cid="ra", netns=netns_path(a))
    for cid, ns, r in (("ra", a, ra), ("rb", b, rb)):
        runtime.call("bridge", "DEL", dict(conf, prevResult=r), cid=cid, netns=netns_path(ns))
    assert net.allocations() == [] and net.rules() == []
    bridge_ports = os.listdir(f"/sys/class/net/{net.bridge}/brif")
    assert bridge_ports == []


SHARED = {"nat": ("CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-MASQ", "CNI-HOSTPORT-SETMARK"),
          "filter": ("CNI-FORWARD", "CNI-ADMIN")}


def _chains(table: str) -> dict[str, list[str]]:
    """chain -> its rules, and '<builtin>:<chain>' -> rules in built-in chains jumping to a CNI- chain."""
    text = subprocess.run(["iptables-nft-save", "-t", table], capture_output=True, text=True).stdout
    out: dict[str, list[str]] = {}
    for ln in text.splitlines():
        if ln.startswith(":"):
            out.setdefault(ln[1:].split()[0], [])
        elif ln.startswith("-A "):
            out.setdefault(ln.split()[1], []).append(ln)
    return out


def _remove_reference_shared_chains(existed: set[str]) -> None:
    """The reference portmap/firewall never delete their shared chains; drop the ones this test made,
    once nothing but their own structure is left in them (another user's rules keep them)."""
    structural = ("CNI portfwd", "CNI firewall plugin", "--mark 0x2000/0x2000 -j MASQUERADE")
    for table, names in SHARED.items():
        chains = _chains(table)
        mine = [c for c in names if c in chains and c not in existed]
        if not mine or any(not any(x in r for x in structural) for c in mine for r in chains[c]):
            continue
        jumps = [r for c, rules in chains.items() if c.isupper() and not c.startswith("CNI-") for r in rules
                 if r.split("-j ")[-1].split()[0] in mine]
        lines = ["-D" + r[2:] for r in jumps] + [f":{c} - [0:0]" for c in mine] + [f"-X {c}" for c in mine]
        subprocess.run(["iptables-nft-restore", "--noflush"],
                       input="\n".join([f"*{table}", *lines, "COMMIT", ""]),
                       text=True, capture_output=True)


def test_our_bridge_chained_with_reference_portmap_bandwidth_firewall(runtime, net, res, outside):
    existed = set(_chains("nat")) | set(_chains("filter"))
    try:
        _chained_with_reference(runtime, net, res, outside)
    finally:
        _remove_reference_shared_chains(existed)


def _chained_with_reference(runtime, net, res, outside):
    ext, host_addr, ext_addr = outside
    pod = res.netns()
    hp = netutil.free_port()
    conflist = net.conflist(
        {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
        {"type": "bandwidth", "capabilities": {"bandwidth": True}},
        {"type": "firewall", "backend": "iptables"},
    )
    rc = {"portMappings": [{"hostPort": hp, "containerPort": 8080, "protocol": "tcp"}],
          "bandwidth": {"ingressRate": 8_000_000, "ingressBurst": 1_000_000,
                        "egressRate": 8_000_000, "egressBurst": 1_000_000}}
    links_before = set(os.listdir("/sys/class/net"))
    result = runtime.add_list(conflist, "chain1", netns_path(pod), runtime_config=rc)
    try:
        _exercise(runtime, conflist, rc, result, pod, hp, ext, host_addr, ext_addr)
    except BaseException:
        with contextlib.suppress(Exception):
            runtime.del_list(conflist, "chain1", netns_path(pod), prev=result, runtime_config=rc)
        raise
    net.assert_clean()
    leftover = {n for n in set(os.listdir("/sys/class/net")) - links_before if n.startswith("bwp")}
    assert leftover == set()  # bandwidth's ifb device ("bwp…") went with DEL


def _exercise(runtime, conflist, rc, result, pod, hp, ext, host_addr, ext_addr):
    host_veth = result["interfaces"][1]["name"]
    assert any(n.startswith("bwp") for n in os.listdir("/sys/class/net"))  # egress shaping made its ifb
    qdisc = os.popen(f"tc qdisc show dev {host_veth}").read()
    assert "tbf" in qdisc or "ingress" in qdisc      # bandwidth shaped our host veth
    srv = netutil.serve(pod, 8080, 1)
    try:
        assert netutil.connect(ext, host_addr, hp) == f"hello {ext_addr}"  # reference portmap DNAT to our pod
    finally:
        netutil.stop(srv)
    # CHECK each plugin but the reference portmap 1.1.1, whose CHECK wrongly requires an IPv6 chain
    # for an IPv4-only result ("could not check ipv6 dnat")
    checkable = dict(conflist, plugins=[p for p in conflist["plugins"] if p["type"] != "portmap"])
    runtime.check_list(checkable, "chain1", netns_path(pod), result, runtime_config=rc)
    runtime.del_list(conflist, "chain1", netns_path(pod), prev=result, runtime_config=rc)

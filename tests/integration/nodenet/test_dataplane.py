"""Each backend for real between two node netnses joined by a veth (the underlay), a pod netns behind each.

The pod on node A pings the pod on node B by IP through host-gw routes, the ipip tunnel or the vxlan
device; removing node B from the view removes every entry of it; teardown leaves nothing of ours.
"""

from __future__ import annotations

import subprocess

import pytest

from nodeagent.nodenet import plan as P
from nodeagent.nodenet.dataplane import RTPROT_NODENET, Dataplane
from tests.harness.resources import sh
from tests.integration.nodenet.nsutil import in_ns

pytestmark = [pytest.mark.root]


def ip(ns: str, *args: str) -> str:
    return sh("ip", "-n", ns, *args).stdout


def make_node(res, idx: int, underlay_ns_peer: str | None, pod_cidr: str):
    """A node netns with a pod netns behind a veth (pod .2,
    node side .1 /24 as the bridge gateway would be)."""
    node, pod = res.netns(), res.netns()
    a, b = res.veth(netns=node, peer_netns=pod)
    ip(node, "addr", "add", pod_cidr.replace(".0/24", ".1/24"), "dev", a)
    ip(node, "link", "set", a, "up")
    ip(pod, "addr", "add", pod_cidr.replace(".0/24", ".2/24"), "dev", b)
    ip(pod, "link", "set", b, "up")
    ip(pod, "route", "add", "default", "via", pod_cidr.replace(".0/24", ".1"))
    sh("ip", "netns", "exec", node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    return node, pod


@pytest.fixture
def two_nodes(res):
    n1, p1 = make_node(res, 1, None, "10.244.1.0/24")
    n2, p2 = make_node(res, 2, None, "10.244.2.0/24")
    u1, u2 = res.veth(netns=n1, peer_netns=n2)
    ip(n1, "addr", "add", "192.168.77.1/24", "dev", u1)
    ip(n2, "addr", "add", "192.168.77.2/24", "dev", u2)
    ip(n1, "link", "set", u1, "up")
    ip(n2, "link", "set", u2, "up")
    return [(n1, p1, "192.168.77.1", "10.244.1.0/24"), (n2, p2, "192.168.77.2", "10.244.2.0/24")]


def annotated(name, pub, cidr, mac):
    from nodeagent.nodenet import annotations as ann

    return {"metadata": {"name": name, "annotations": {ann.PUBLIC_IP: pub, ann.POD_CIDR: cidr,
                                                       **({ann.VTEP_MAC: mac} if mac else {})}}}


def ping(pod: str, addr: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", pod, "busybox", "ping", "-c", "2", "-W", "2",
                           "-i", "0.2", addr],
                          capture_output=True, text=True, check=False)


@pytest.mark.parametrize("mode", ["host-gw", "ipip", "vxlan"])
def test_pods_on_two_nodes_reach_each_other(two_nodes, mode, require):
    if mode == "ipip":
        require("ipip")
    planes = []
    for ns, _pod, pub, cidr in two_nodes:
        dp = Dataplane(mode, pub, cidr)
        in_ns(ns, dp.setup)
        planes.append(dp)
    view = [annotated(f"n{i}", pub, cidr, dp.vtep_mac)
            for i, ((_ns, _p, pub, cidr), dp) in enumerate(zip(two_nodes, planes, strict=True))]
    for i, ((ns, _p, _pub, _c), dp) in enumerate(zip(two_nodes, planes, strict=True)):
        want = P.desired(mode, f"n{i}", view)

        def converge(dp: Dataplane = dp, want: P.Plan = want) -> None:
            dp.apply(P.diff(want, dp.current()))

        in_ns(ns, converge)
        assert in_ns(ns, dp.current) == want  # the kernel holds exactly the plan
    if mode == "vxlan":
        link = ip(two_nodes[0][0], "-d", "link", "show", P.VXLAN_DEVICE)
        assert "vxlan id 1 " in link and "dstport 8472" in link and "mtu 1450" in link
        mac = planes[1].vtep_mac
        assert mac and mac in ip(two_nodes[0][0], "neigh", "show", "dev", P.VXLAN_DEVICE)
        fdb = sh("bridge", "-n", two_nodes[0][0], "fdb", "show", "dev", P.VXLAN_DEVICE).stdout
        assert "dst 192.168.77.2" in fdb
    r = ping(two_nodes[0][1], "10.244.2.2")
    assert r.returncode == 0, r.stdout + r.stderr
    r = ping(two_nodes[1][1], "10.244.1.2")
    assert r.returncode == 0, r.stdout + r.stderr

    # node 2 leaves: node 1 drops every entry for it, and the pod becomes unreachable
    n1, dp1 = two_nodes[0][0], planes[0]
    in_ns(n1, lambda: dp1.apply(P.diff(P.desired(mode, "n0", view[:1]), dp1.current())))
    assert in_ns(n1, dp1.current) == P.Plan(mode, frozenset())
    assert ping(two_nodes[0][1], "10.244.2.2").returncode != 0

    for (ns, *_), dp in zip(two_nodes, planes, strict=True):
        in_ns(ns, dp.teardown)
        assert f"proto {RTPROT_NODENET}" not in ip(ns, "route", "show", "proto", str(RTPROT_NODENET))
        assert ip(ns, "route", "show", "proto", str(RTPROT_NODENET)).strip() == ""
        if mode == "vxlan":
            assert P.VXLAN_DEVICE not in ip(ns, "link")

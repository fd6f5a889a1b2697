"""Cross-node pod networking on a 2-node netns lab, once per backend: each node's pods get addresses from
the podCIDR the server's node IPAM gave its Node, pods ping and reach each other by IP, and routes follow
nodes joining and leaving."""

from __future__ import annotations

import ipaddress

import pytest

from nodeagent.nodenet import annotations as ann
from nodeagent.nodenet.dataplane import RTPROT_NODENET
from tests.e2e.cluster.lab import http, ping, start_lab, stop_lab, web_pod

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module", params=["host-gw", "vxlan", "ipip"])
def lab(request, tmp_path_factory, images, host):
    if request.param == "ipip" and not host.has("ipip"):
        pytest.skip(f"host lacks ipip: {host.why_not('ipip')}")
    lab = start_lab(tmp_path_factory.mktemp(f"lab-{request.param}"), images, 2, request.param)
    try:
        yield lab
    finally:
        stop_lab(lab)


def test_pods_on_different_nodes_reach_each_other_by_ip(lab):
    lab.apply(web_pod("a", "node1", {"app": "pn"}))
    lab.apply(web_pod("b", "node2", {"app": "pn"}))
    pods = {p["spec"]["nodeName"]: p for p in lab.running("app=pn", 2)}
    a, b = pods["node1"], pods["node2"]
    # the agents were given no subnet: each adopted its Node's spec.podCIDR,
    # out of the server's --cluster-cidr
    cidrs = {n["metadata"]["name"]: n["spec"].get("podCIDR") for n in lab.get("nodes")["items"]}
    assert cidrs["node1"] and cidrs["node2"] and cidrs["node1"] != cidrs["node2"], cidrs
    for name, pod in pods.items():
        cidr = ipaddress.IPv4Network(cidrs[name])
        assert cidr.subnet_of(ipaddress.IPv4Network("10.244.0.0/16")) and cidr.prefixlen == 24, cidrs
        assert ipaddress.ip_address(pod["status"]["podIP"]) in cidr, (name, pod["status"]["podIP"], cidrs)
        # nobody announced an override: the routes come from spec.podCIDR
        assert ann.POD_CIDR not in lab.get("node", name)["metadata"].get("annotations", {})
    for src, dst in ((a, b), (b, a)):
        r = ping(lab, src, dst["status"]["podIP"])
        assert r.returncode == 0, r.stdout + r.stderr
        assert http(lab, src, f"http://{dst['status']['podIP']}/") == "hello from busybox\n"
    # no masquerade inside the cluster: node2 saw pod a's own address as the source
    seen = lab.on_node("node2", "conntrack", "-L", "-p", "tcp", "-d", b["status"]["podIP"]).stdout
    assert f"src={a['status']['podIP']} " in seen, seen
    # the node itself reaches the remote pod too (its source is routable back)
    assert http(lab, "node1", f"http://{b['status']['podIP']}/") == "hello from busybox\n"
    if lab.mode == "vxlan":
        link = lab.on_node("node1", "ip", "-d", "link", "show", "nodenet.1").stdout
        assert "vxlan id 1 " in link and "dstport 8472" in link and "mtu 1450" in link


def test_routes_follow_nodes_joining_and_leaving(lab):
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "ghost", "annotations": {
                ann.PUBLIC_IP: lab.topo.host_address, ann.POD_CIDR: "10.244.77.0/24",
                ann.VTEP_MAC: "02:00:00:00:77:01"}}}
    lab.apply(node)

    def routes(n: str) -> str:
        return lab.on_node(n, "ip", "route", "show", "proto", str(RTPROT_NODENET)).stdout

    try:
        for n in ("node1", "node2"):
            lab.wait(f"a route for the new node on {n}", lambda n=n: "10.244.77.0/24" in routes(n), 30)
        if lab.mode == "vxlan":
            neigh = lab.on_node("node1", "ip", "neigh", "show", "dev", "nodenet.1").stdout
            assert "02:00:00:00:77:01" in neigh
            fdb = lab.on_node("node1", "bridge", "fdb", "show", "dev", "nodenet.1").stdout
            assert f"dst {lab.topo.host_address}" in fdb
    finally:
        lab.kubectl("delete", "node", "ghost", "--wait=false")
    for n in ("node1", "node2"):
        lab.wait(f"the route for the gone node removed on {n}",
                 lambda n=n: "10.244.77.0/24" not in routes(n), 30)
    if lab.mode == "vxlan":
        fdb = lab.on_node("node1", "bridge", "fdb", "show", "dev", "nodenet.1").stdout
        assert "02:00:00:00:77:01" not in fdb
    # the real peers' routes stay: to each one's spec.podCIDR
    cidrs = {n["metadata"]["name"]: n["spec"]["podCIDR"] for n in lab.get("nodes")["items"]}
    assert cidrs["node2"] in routes("node1") and cidrs["node1"] in routes("node2"), cidrs


def test_masquerade_only_for_traffic_leaving_the_cluster(lab):
    rules = lab.on_node("node1", "iptables", "-t", "nat", "-S", "POSTROUTING").stdout.splitlines()
    exempt = [i for i, r in enumerate(rules) if "-s 10.244.0.0/16 -d 10.244.0.0/16" in r and "RETURN" in r]
    masq = [i for i, r in enumerate(rules) if "NA-MASQ-" in r and "-j NA-MASQ" in r]
    assert exempt and masq and exempt[0] < masq[0], rules

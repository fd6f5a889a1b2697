"""BIRD configs rendered from the cluster view: the sessions each topology gets, what each filter lets
through, and that BIRD itself accepts every render (`bird -p`) and refuses a broken one."""

from __future__ import annotations

import asyncio
import re
import shutil
from typing import Any

import pytest

from nodeagent.nodenet import annotations as ann
from nodeagent.nodenet import birdconf as bc
from nodeagent.nodenet import controller
from nodeagent.nodenet.bgp import cluster_settings, node_peers, sessions_of
from nodeagent.nodenet.bird import InvalidConfig, Protocol, check_config, parse_protocols
from nodeagent.nodenet.config import BGPSettings, PodNetworkConfig

NODES = tuple(bc.NodePeer(f"n{i}", f"172.30.9.{i}") for i in range(1, 5))


def settings(me: int = 1, **kw) -> bc.BirdSettings:
    kw.setdefault("nodes", NODES)
    return bc.BirdSettings(f"n{me}", f"172.30.9.{me}", 64512, "10.244.0.0/16", f"10.244.{me}.0/24", **kw)


def protocols(text: str) -> dict[str, str]:
    pattern = r"protocol bgp (\S+) (?:from nodes )?\{(.*?)\n\}"
    return {m.group(1): m.group(2) for m in re.finditer(pattern, text, re.S)}


def test_full_mesh_one_session_per_other_node_and_one_side_connects():
    text = bc.render(settings(2))
    got = protocols(text)
    assert set(got) == {"Mesh_172_30_9_1", "Mesh_172_30_9_3", "Mesh_172_30_9_4"}
    assert "router id 172.30.9.2;" in text and "define CLUSTER_AS = 64512;" in text
    # the lower address waits for the higher one (Calico's unidirectional mesh)
    assert "passive on" not in got["Mesh_172_30_9_1"]
    assert "passive on" in got["Mesh_172_30_9_3"] and "passive on" in got["Mesh_172_30_9_4"]
    assert "route 10.244.2.0/24 blackhole;" in text
    assert "rr client;" not in text


def test_route_reflector_topology():
    rr = bc.render(settings(1, reflectors=("n1",)))
    got = protocols(rr)
    assert set(got) == {"Mesh_172_30_9_2", "Mesh_172_30_9_3", "Mesh_172_30_9_4"}
    assert all("rr client;" in body for body in got.values())
    client = protocols(bc.render(settings(3, reflectors=("n1",))))
    assert set(client) == {"Mesh_172_30_9_1"} and "rr client" not in client["Mesh_172_30_9_1"]
    # two reflectors peer as plain iBGP neighbours; each has the clients as rr clients
    both = protocols(bc.render(settings(2, reflectors=("n1", "n2"))))
    assert "rr client" not in both["Mesh_172_30_9_1"] and "rr client;" in both["Mesh_172_30_9_3"]


def test_external_peers_and_service_ranges():
    s = settings(1, external=(bc.ExternalPeer("tor", "172.30.9.250", 64513),
                              bc.ExternalPeer("other", "172.30.9.251", 64513, node_specific=True, port=1179)),
                 service_cidrs=("10.96.0.0/12",), announce=("192.0.2.10/32",))
    text = bc.render(s)
    got = protocols(text)
    assert "neighbor 172.30.9.250 port 179 as 64513;" in got["Global_172_30_9_250"]
    assert "Node_172_30_9_251_port_1179" in got
    assert "route 10.96.0.0/12 blackhole;" in text and "route 192.0.2.10/32 blackhole;" in text
    assert "bgp_path.prepend(CLUSTER_AS);" in text
    # nothing a router announces inside the cluster's own ranges is taken
    assert "if net ~ [ 10.244.0.0/16+ ] then reject;" in text
    # the Service ranges never reach the kernel nor the other nodes
    kernel = text.split("filter kernel_export {")[1].split("}")[0]
    assert "services" not in kernel


def test_no_sessions_without_other_nodes_and_no_aggregate_without_a_pod_cidr():
    text = bc.render(bc.BirdSettings("n1", "172.30.9.1", 64512, "10.244.0.0/16", None))
    assert "protocol bgp" not in text and not re.search(r"^\s*route ", text, re.M) and "No other node" in text


@pytest.mark.skipif(not shutil.which("bird"), reason="BIRD 2 is not installed (make install adds bird2)")
@pytest.mark.parametrize("s", [
    settings(1), settings(1, reflectors=("n1",)), settings(3, reflectors=("n1", "n2")),
    settings(2, external=(bc.ExternalPeer("tor", "172.30.9.250", 64513),), service_cidrs=("10.96.0.0/12",)),
    settings(2, external=(bc.ExternalPeer("ibgp", "172.30.9.250", 64512),)),
    bc.BirdSettings("n1", "172.30.9.1", 4200000000, "10.244.0.0/16", None)])
def test_bird_accepts_every_render(s, tmp_path):
    asyncio.run(check_config(bc.render(s), tmp_path))
    assert not list(tmp_path.iterdir())  # the candidate file is gone


@pytest.mark.skipif(not shutil.which("bird"), reason="BIRD 2 is not installed (make install adds bird2)")
def test_bird_refuses_a_broken_render_with_its_reason(tmp_path):
    broken = bc.render(settings(1)).replace("router id 172.30.9.1;", "router id 172.30.9.1")
    with pytest.raises(InvalidConfig, match=r"bird\.conf:\d+:\d+ syntax error"):
        asyncio.run(check_config(broken, tmp_path))


def test_settings_are_validated():
    with pytest.raises(ValueError):
        bc.BirdSettings("n1", "not-an-ip", 64512, "10.244.0.0/16", None)
    with pytest.raises(ValueError):
        bc.BirdSettings("n1", "172.30.9.1", 0, "10.244.0.0/16", None)
    with pytest.raises(ValueError, match="--bgp-as"):
        BGPSettings(asn=2**32)
    with pytest.raises(ValueError, match="not a node name"):
        BGPSettings(route_reflectors=("Node_1",))
    with pytest.raises(ValueError, match="need --pod-network bgp"):
        PodNetworkConfig("k", "vxlan", bgp=BGPSettings())


def test_parse_show_protocols():
    out = """BIRD 2.0.12 ready.
Name       Proto      Table      State  Since         Info
device1    Device     ---        up     07:49:40.633
kernel1    Kernel     master4    up     07:49:40.633
Mesh_172_31_250_2 BGP        ---        up     07:49:41.492  Established
Global_172_30_9_250 BGP        ---        start  07:49:41.492  Active        Socket: Connection refused
"""
    rows = {p.name: p for p in parse_protocols(out)}
    assert set(rows) == {"device1", "kernel1", "Mesh_172_31_250_2", "Global_172_30_9_250"}
    assert rows["Mesh_172_31_250_2"].bgp_state == "Established" and not rows["Mesh_172_31_250_2"].last_error
    assert rows["Global_172_30_9_250"].bgp_state == "Active"
    assert rows["Global_172_30_9_250"].last_error == "Socket: Connection refused"


def test_sessions_reported_for_every_configured_peer():
    s = settings(1, nodes=NODES[:2], external=(bc.ExternalPeer("tor", "172.30.9.250", 64513),))
    rows = [Protocol("Mesh_172_30_9_2", "BGP", "---", "up", "07:00:00", "Established"),
            Protocol("Global_172_30_9_250", "BGP", "---", "start", "07:00:00",
                     "Active Socket: No route to host")]
    got = {x["name"]: x for x in sessions_of(s, rows)}
    assert got["Mesh_172_30_9_2"]["state"] == "Established" and got["Mesh_172_30_9_2"]["peer"] == "node n2"
    assert got["Global_172_30_9_250"]["lastError"] == "Socket: No route to host"
    down = sessions_of(s, None, "BIRD is not running")
    assert {x["state"] for x in down} == {"Down"} and down[0]["lastError"] == "BIRD is not running"


def test_cluster_settings_and_peers_from_nodes():
    me = {"metadata": {"name": "n1", "annotations": {ann.BGP_AS: "65000", ann.BGP_ROUTE_REFLECTORS: "n1, n2",
                                                     ann.BGP_SERVICE_CIDRS: "10.96.0.0/12"}}}
    assert cluster_settings(me) == (65000, ("n1", "n2"), ("10.96.0.0/12",))
    assert cluster_settings({}) == (bc.DEFAULT_AS, (), ())
    nodes: list[dict[str, Any]] = [
        me, {"metadata": {"name": "n2", "annotations": {ann.PUBLIC_IP: "172.30.9.2"}}},
        {"metadata": {"name": "n3"}},  # not published yet
        {"metadata": {"name": "n4", "annotations": {ann.PUBLIC_IP: "bogus"}}}]
    assert node_peers(nodes, "n1") == (bc.NodePeer("n2", "172.30.9.2"),)


def test_server_stamps_bgp_settings_and_refuses_a_mode_switch():
    node: dict[str, Any] = {"metadata": {"name": "n1", "annotations": {}}}
    bgp = BGPSettings(65001, ("n1",), ("10.96.0.0/12",))
    patch = controller.needed_patch(node, "bgp", "10.244.0.0/16", bgp)
    assert patch == {"metadata": {"annotations": {
        ann.BACKEND: "bgp", ann.CLUSTER_CIDR: "10.244.0.0/16", ann.BGP_AS: "65001",
        ann.BGP_ROUTE_REFLECTORS: "n1", ann.BGP_SERVICE_CIDRS: "10.96.0.0/12"}}}
    node["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    controller.check_no_switch([node], "bgp")
    with pytest.raises(SystemExit, match=r"--pod-network vxlan refused: .*\(bgp on n1\)"):
        controller.check_no_switch([node], "vxlan")


def test_bgppeer_selectors_and_fields():
    from nodeagent.nodenet import bgppeer

    labels = {"rack": "a", "kubernetes.io/hostname": "n1"}
    yes = ["", "all()", "rack == 'a'", "has(rack) && !has(zone)", "rack in {'a', 'b'}", "rack not in {'c'}",
           "kubernetes.io/hostname == \"n1\"", "rack != 'b'"]
    no = ["rack == 'b'", "has(zone)", "rack in {'b'}", "rack not in {'a'}"]
    for s in yes:
        assert bgppeer.parse_selector(s)(labels), s
    for s in no:
        assert not bgppeer.parse_selector(s)(labels), s
    for bad in ["rack == a", "a || b", "!rack", "has(rack) &&"]:
        with pytest.raises(ValueError):
            bgppeer.parse_selector(bad)
        assert not re.fullmatch(bgppeer.SELECTOR_PATTERN, bad)
    node = {"metadata": {"name": "n1", "labels": labels}}
    peers = [{"metadata": {"name": "tor"}, "spec": {"peerIP": "172.30.9.250", "asNumber": 64513}},
             {"metadata": {"name": "rack-b"}, "spec": {"peerIP": "172.30.9.251:1179", "asNumber": 64514,
                                                       "nodeSelector": "rack == 'b'"}},
             {"metadata": {"name": "rack-a"}, "spec": {"peerIP": "172.30.9.252:1179", "asNumber": 64514,
                                                       "nodeSelector": "rack == 'a'"}},
             {"metadata": {"name": "tor2"}, "spec": {"peerIP": "172.30.9.250", "asNumber": 64513}},
             {"metadata": {"name": "broken"}, "spec": {"peerIP": "nope", "asNumber": 1}}]
    problems: list[str] = []
    got = bgppeer.peers_for(node, peers, problems)
    assert got == (bc.ExternalPeer("tor", "172.30.9.250", 64513),
                   bc.ExternalPeer("rack-a", "172.30.9.252", 64514, node_specific=True, port=1179))
    assert len(problems) == 2 and any("tor2" in p for p in problems) and any("broken" in p for p in problems)
    assert re.fullmatch(bgppeer.PEER_IP_PATTERN, "10.0.0.1:179")
    assert not re.fullmatch(bgppeer.PEER_IP_PATTERN, "10.0.0.256") and not re.fullmatch(
        bgppeer.PEER_IP_PATTERN, "10.0.0.1:65536")

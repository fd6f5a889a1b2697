"""The planner: what each backend wants for the other nodes, and the diff against the kernel's entries."""

from __future__ import annotations

import pytest

from nodeagent.nodenet import annotations as ann
from nodeagent.nodenet import controller
from nodeagent.nodenet import plan as P


def node(name, ip=None, cidr=None, mac=None, spec_cidr=None):
    a = {}
    if ip:
        a[ann.PUBLIC_IP] = ip
    if cidr:
        a[ann.POD_CIDR] = cidr
    if mac:
        a[ann.VTEP_MAC] = mac
    return {"metadata": {"name": name, "annotations": a}, "spec": {"podCIDR": spec_cidr} if spec_cidr else {}}


NODES = [node("n1", "10.99.0.1", "10.244.1.0/24", "aa:00:00:00:00:01"),
         node("n2", "10.99.0.2", "10.244.2.0/24", "AA:00:00:00:00:02"),
         node("n3", "10.99.0.3", "10.244.3.0/24", "aa:00:00:00:00:03")]


def test_host_gw_routes_each_remote_subnet_via_its_node():
    p = P.desired("host-gw", "n1", NODES)
    assert p.routes == {
        P.Route("10.244.2.0/24", "10.99.0.2", None), P.Route("10.244.3.0/24", "10.99.0.3", None)}
    assert not p.fdb and not p.neigh


def test_ipip_routes_onlink_through_the_tunnel():
    p = P.desired("ipip", "n2", NODES)
    assert p.routes == {P.Route("10.244.1.0/24", "10.99.0.1", "tunl0", True),
                        P.Route("10.244.3.0/24", "10.99.0.3", "tunl0", True)}


def test_vxlan_has_route_neighbour_and_fdb_per_remote_node():
    p = P.desired("vxlan", "n3", NODES)
    assert p.routes == {P.Route("10.244.1.0/24", "10.244.1.0", P.VXLAN_DEVICE, True),
                        P.Route("10.244.2.0/24", "10.244.2.0", P.VXLAN_DEVICE, True)}
    assert p.neigh == {P.Neigh("10.244.1.0", "aa:00:00:00:00:01"), P.Neigh("10.244.2.0", "aa:00:00:00:00:02")}
    assert p.fdb == {P.Fdb("aa:00:00:00:00:01", "10.99.0.1"), P.Fdb("aa:00:00:00:00:02", "10.99.0.2")}


def test_half_published_nodes_are_skipped_and_spec_podcidr_is_the_fallback():
    nodes = [node("n1", "10.99.0.1", "10.244.1.0/24"), node("n2", "10.99.0.2"),
             node("n3", cidr="10.244.3.0/24"),
             node("n4", "10.99.0.4", spec_cidr="10.244.4.0/24"), node("n5", "10.99.0.5", "10.244.5.0/24")]
    assert {r.dst for r in P.desired("host-gw", "n1", nodes).routes} == {"10.244.4.0/24", "10.244.5.0/24"}
    # vxlan needs the VTEP MAC too
    assert P.desired("vxlan", "n1", nodes).routes == frozenset()


def test_a_node_claiming_our_subnet_is_never_routed():
    nodes = [*NODES, node("rogue", "10.99.0.9", "10.244.1.0/25")]
    assert "10.244.1.0/25" not in {r.dst for r in P.desired("host-gw", "n1", nodes).routes}


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError):
        P.desired("gre", "n1", NODES)


def test_diff_follows_nodes_joining_and_leaving():
    before = P.desired("vxlan", "n1", NODES)
    after = P.desired("vxlan", "n1",
                      [NODES[0], NODES[2], node("n4", "10.99.0.4", "10.244.4.0/24", "aa:00:00:00:00:04")])
    c = P.diff(after, before)
    assert [r.dst for r in c.del_routes] == ["10.244.2.0/24"]
    assert [r.dst for r in c.add_routes] == ["10.244.4.0/24"]
    assert c.del_fdb == [P.Fdb("aa:00:00:00:00:02", "10.99.0.2")]
    assert c.add_neigh == [P.Neigh("10.244.4.0", "aa:00:00:00:00:04")]
    assert P.diff(after, after).empty()
    assert not c.empty()


def test_mtu_and_tunnel_address():
    assert P.mtu_for("vxlan", 1500) == 1450
    assert P.mtu_for("ipip", 1500) == 1480
    assert P.mtu_for("host-gw", 1500) is None
    assert P.tunnel_address("10.244.7.0/24") == "10.244.7.0"


def test_my_annotations_drop_the_vtep_mac_outside_vxlan():
    mac = "aa:bb:cc:dd:ee:ff"
    assert P.my_annotations("host-gw", "10.99.0.1", "10.244.1.0/24", mac)[ann.VTEP_MAC] is None
    assert P.my_annotations("vxlan", "10.99.0.1", "10.244.1.0/24", mac)[ann.VTEP_MAC] == mac


def test_server_stamps_mode_and_cluster_cidr_once():
    n = node("n1")
    patch = controller.needed_patch(n, "vxlan", "10.244.0.0/16")
    assert patch == {"metadata": {"annotations": {ann.BACKEND: "vxlan", ann.CLUSTER_CIDR: "10.244.0.0/16"}}}
    n["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    assert controller.needed_patch(n, "vxlan", "10.244.0.0/16") is None
    assert controller.needed_patch(n, "host-gw", "10.244.0.0/16") is not None

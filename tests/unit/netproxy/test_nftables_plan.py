from collections import Counter

from kernel import nftables as nl
from netproxy.model import Endpoint, parse_service
from netproxy.nftables import encode
from netproxy.nftables.plan import (
    HAIRPIN,
    MAX_PICKED,
    NO_EP_NODEPORTS,
    NO_EP_SERVICES,
    NO_LOCAL_NODEPORTS,
    NODEPORT_ENDPOINTS,
    SERVICE_ENDPOINTS,
    SERVICE_IPS,
    SERVICE_NODEPORTS,
    plan_port,
    service_chain,
)
from netproxy.nftables.proxier import _hairpin_delta, partial
from netproxy.proxier import NodeConfig
from nodeagent.testing.netproxy_lab import service

NODE = NodeConfig(node_name="me", cluster_cidr="10.244.0.0/16")
EPS = [Endpoint(f"10.244.0.{i}", 8080, node_name="me" if i == 1 else "other") for i in (1, 2, 3)]


def port(**spec):
    ports = spec.pop("ports", [{"name": "http", "port": 80, "protocol": "TCP"}])
    return next(iter(parse_service(service("web", "10.96.0.10", ports, **spec)).values()))


def test_plain_cluster_ip_port_is_elements_only():
    p = plan_port(port(), EPS, NODE)
    assert p.chains == {} and p.sets == {}  # no rule, no jump: nothing the kernel re-validates
    assert p.elements == {
        ("service-ips-3-endpoints", "10.96.0.10", "TCP", 80): None,
        (SERVICE_ENDPOINTS, "10.96.0.10", "TCP", 80, 0): ("10.244.0.1", 8080),
        (SERVICE_ENDPOINTS, "10.96.0.10", "TCP", 80, 1): ("10.244.0.2", 8080),
        (SERVICE_ENDPOINTS, "10.96.0.10", "TCP", 80, 2): ("10.244.0.3", 8080),
    }
    assert p.hairpin == ("10.244.0.1", "10.244.0.2", "10.244.0.3")
    assert ("service-ips-1-endpoint", "10.96.0.10", "TCP", 80) in plan_port(port(), EPS[:1], NODE).elements


def test_ports_needing_per_service_logic_keep_chains():
    many = [Endpoint(f"10.244.1.{i}", 8080) for i in range(MAX_PICKED + 1)]
    sticky = port(sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 30}})
    local = port(type="NodePort", externalTrafficPolicy="Local",
                 ports=[{"name": "http", "port": 80, "nodePort": 30080}])
    external = port(externalIPs=["192.0.2.1"])
    for sp, eps in ((sticky, EPS), (local, EPS), (external, EPS), (port(), many)):
        p = plan_port(sp, eps, NODE)
        assert service_chain(sp.name) in p.chains and not p.hairpin
        assert p.elements[(SERVICE_IPS, "10.96.0.10", "TCP", 80)] == ("goto", service_chain(sp.name))
    assert (SERVICE_NODEPORTS, None, "TCP", 30080) in plan_port(local, EPS, NODE).elements


def test_cluster_policy_node_port_is_elements_only():
    sp = port(type="NodePort", ports=[{"name": "http", "port": 80, "nodePort": 30080}])
    p = plan_port(sp, EPS[:2], NODE)
    assert p.chains == {}
    assert p.elements[("service-nodeports-2-endpoints", None, "TCP", 30080)] is None
    assert p.elements[(NODEPORT_ENDPOINTS, None, "TCP", 30080, 1)] == ("10.244.0.2", 8080)
    assert encode.elem_key((NODEPORT_ENDPOINTS, None, "TCP", 30080, 1)) == \
        bytes([6, 0, 0, 0]) + (30080).to_bytes(2, "big") + b"\0\0" + (1).to_bytes(4, "little")


def test_no_endpoints_reject_and_local_policy_drop_are_plain_set_elements():
    assert plan_port(port(), [], NODE).elements == {(NO_EP_SERVICES, "10.96.0.10", "TCP", 80): None}
    local = port(type="NodePort", externalTrafficPolicy="Local",
                 ports=[{"name": "http", "port": 80, "nodePort": 30081}])
    remote_only = [e for e in EPS if e.node_name != "me"]
    p = plan_port(local, remote_only, NODE)
    assert p.elements[(NO_LOCAL_NODEPORTS, None, "TCP", 30081)] is None  # drop: other nodes may have some
    assert (NO_EP_NODEPORTS, None, "TCP", 30081) not in p.elements


def test_endpoint_change_of_a_picked_port_writes_no_rule():
    sp = port()
    old, new = plan_port(sp, EPS, NODE), plan_port(sp, EPS[:2], NODE)
    b = nl.Batch("t")
    partial(b, {sp.name: old}, {sp.name: new})
    assert b.counts["rules"] == 0 and b.counts["chains"] == 0
    kinds = [b.msgs[i][0] & 0xFF for i in range(len(b.msgs))]
    assert kinds == [nl.DELSETELEM, nl.DELSETELEM, nl.NEWSETELEM]  # (3-set key, slot 2) out; 2-set key in


def test_hairpin_refcounts_shared_endpoint_ips():
    refs: Counter[str] = Counter()
    a, b = plan_port(port(), EPS[:2], NODE), plan_port(port(), EPS[1:], NODE)
    assert _hairpin_delta(refs, [], [a]) == ([], ["10.244.0.1", "10.244.0.2"])
    assert _hairpin_delta(refs, [], [b]) == ([], ["10.244.0.3"])  # .2 already present
    gone, fresh = _hairpin_delta(refs, [a], [])
    assert gone == ["10.244.0.1"] and fresh == []  # .2 still used by b
    assert _hairpin_delta(refs, [b], [b]) == ([], [])


def test_element_encodings():
    key = encode.elem_key((SERVICE_ENDPOINTS, "10.96.0.10", "TCP", 80, 2))
    # register layout: daddr | l4proto padded | dport padded | numgen's host-endian u32
    assert key == bytes([10, 96, 0, 10, 6, 0, 0, 0, 0, 80, 0, 0]) + (2).to_bytes(4, "little")
    assert encode.elem_key((HAIRPIN, "10.0.0.5")) == bytes([10, 0, 0, 5] * 2)


def test_typeof_userdata_matches_nft():
    # what nft 1.0.6 stores for `typeof ip daddr . meta l4proto . th dport . numgen random mod 1 :
    # ip daddr . th dport` and `typeof ip saddr . ip daddr` (read back from the kernel)
    assert encode.ENDPOINTS_UDATA.hex() == (
        "000400000000010400000000036000040d00000001580014000407000000010c00040c00000001040c000000010e0004090000"
        "0001060004100000000214000407000000010c00040b000000010402000000031a000417000000011200040100000001040100"
        "0000020400000000043400040d000000012c0014000407000000010c00040c00000001040c0000000114000407000000010c00"
        "040b000000010402000000060400000000")
    assert encode.HAIRPIN_UDATA.hex() == (
        "000400000000033400040d000000012c0014000407000000010c00040c00000001040b0000000114000407000000010c00040c"
        "00000001040c000000")

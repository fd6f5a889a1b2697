"""loadBalancerSourceRanges in every mode: LB traffic from an allowed range goes on to the Service, other
sources are dropped before DNAT (kube-proxy's KUBE-FW-/KUBE-PROXY-FIREWALL, its nftables firewall chain,
its ipvs ipsets); NodePorts and the ClusterIP are not filtered; the node's own requests are allowed when a
range holds its address."""

from __future__ import annotations

from typing import Any

from netproxy.hashing import ext_chain, fw_chain
from netproxy.iptables.plan import FILTER, NAT, full_restore, jump_rules, plan_port
from netproxy.ipvs.plan import plan as ipvs_plan
from netproxy.model import Endpoint, ServicePort, parse_service
from netproxy.nftables.plan import SERVICE_IPS, external_chain, firewall_chain
from netproxy.nftables.plan import plan_port as nft_plan_port
from netproxy.proxier import NodeConfig
from nodeagent.testing.netproxy_lab import service

NODE = NodeConfig(node_name="me", node_ips=("192.168.1.10",), cluster_cidr="10.244.0.0/16")
EPS = (Endpoint("10.244.0.1", 8080, node_name="me"),)
LB = "203.0.113.7"


def lb_port(ranges: list[str]) -> ServicePort:
    svc: dict[str, Any] = service("web", "10.96.0.10", [{"port": 80, "protocol": "TCP", "nodePort": 30080}],
                                  type="LoadBalancer", loadBalancerSourceRanges=ranges)
    svc["status"] = {"loadBalancer": {"ingress": [{"ip": LB}]}}
    (sp,) = parse_service(svc).values()
    return sp


def test_iptables_fw_chain_and_firewall_drop() -> None:
    sp = lb_port(["198.51.100.0/24", " 10.1.0.0/16"])
    assert sp.source_ranges == ("198.51.100.0/24", "10.1.0.0/16")
    r = plan_port(sp, EPS, NODE)
    fw, ext = fw_chain(sp.name), ext_chain(sp.name)
    lb_rule = next(x for x in r.dispatch[(NAT, "KUBE-SERVICES")] if f"-d {LB}/32" in x)
    assert lb_rule.endswith(f"-j {fw}")
    assert r.chains[fw] == [f'-m comment --comment "default/web loadbalancer IP" -s {c} -j {ext}'
                            for c in ("198.51.100.0/24", "10.1.0.0/16")]
    (drop,) = r.dispatch[(FILTER, "KUBE-PROXY-FIREWALL")]
    assert f"-d {LB}/32 --dport 80 -j DROP" in drop and f"traffic not accepted by {fw}" in drop
    # NodePorts stay unfiltered, as kube-proxy's
    assert any("--dport 30080" in x and x.endswith(f"-j {ext}") for x in r.dispatch[(NAT, "KUBE-NODEPORTS")])
    text = full_restore({sp.name: r}, NODE)
    assert ":KUBE-PROXY-FIREWALL - [0:0]" in text and f":{fw} - [0:0]" in text
    assert ("filter", "INPUT", '-m conntrack --ctstate NEW -m comment --comment "kube-proxy firewall rules" '
                               '-j KUBE-PROXY-FIREWALL') in jump_rules(NODE)


def test_iptables_node_in_a_range_may_reach_its_own_lb_ip_and_no_ranges_no_chain() -> None:
    r = plan_port(lb_port(["192.168.1.0/24"]), EPS, NODE)
    fw = fw_chain(lb_port([]).name)
    assert any(f"-s {LB}/32" in x for x in r.chains[fw])
    plain = plan_port(lb_port([]), EPS, NODE)
    assert fw not in plain.chains and (FILTER, "KUBE-PROXY-FIREWALL") not in plain.dispatch


def test_nftables_firewall_chain() -> None:
    sp = lb_port(["198.51.100.0/24"])
    p = nft_plan_port(sp, EPS, NODE)
    fw = firewall_chain(sp.name)
    assert p.elements[(SERVICE_IPS, LB, "TCP", 80)] == ("goto", fw)
    assert p.chains[fw] == [("saddr_goto", "198.51.100.0/24", external_chain(sp.name)), ("drop",)]
    from netproxy.nftables.encode import rule_exprs

    assert all(rule_exprs(rule) for rule in p.chains[fw])  # every rule encodes


def test_ipvs_ipsets() -> None:
    sp = lb_port(["198.51.100.0/24", "192.168.1.0/24"])
    d = ipvs_plan({sp.name: sp}, {sp.name: EPS}, NODE)
    assert d.ipsets["KUBE-LOAD-BALANCER-FW"] == {f"{LB},tcp:80"}
    assert d.ipsets["KUBE-LOAD-BALANCER-SOURCE-CIDR"] == {f"{LB},tcp:80,198.51.100.0/24",
                                                          f"{LB},tcp:80,192.168.1.0/24"}
    assert d.ipsets["KUBE-LOAD-BALANCER-SOURCE-IP"] == {f"{LB},tcp:80,{LB}"}
    assert d.services[(LB, "TCP", 80)].dests == {("10.244.0.1", 8080, 1)}


def test_proxy_ip_mode_is_left_to_the_load_balancer() -> None:
    svc: dict[str, Any] = service("web", "10.96.0.10", [{"port": 80, "protocol": "TCP", "nodePort": 30080}],
                                  type="LoadBalancer")
    svc["status"] = {"loadBalancer": {"ingress": [{"ip": LB, "ipMode": "Proxy"}, {"ip": "203.0.113.8",
                                                                                  "ipMode": "VIP"}]}}
    (sp,) = parse_service(svc).values()
    assert sp.load_balancer_ips == ("203.0.113.8",)

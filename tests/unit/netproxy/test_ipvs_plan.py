from netproxy.ipvs.plan import Desired, diff, iptables_rules, plan
from netproxy.model import Endpoint, parse_service
from netproxy.proxier import NodeConfig
from nodeagent.testing.netproxy_lab import service

NODE = NodeConfig(node_name="me", node_ips=("192.168.1.10",), cluster_cidr="10.244.0.0/16")
EPS = (Endpoint("10.244.0.1", 8080, node_name="me"), Endpoint("10.244.0.2", 8080, node_name="other"))


def ports(**spec):
    ports = spec.pop("ports", [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}])
    return parse_service(service("web", "10.96.0.10", ports, **spec))


def test_cluster_ip_nodeport_and_ipsets():
    svcs = ports(type="NodePort")
    (spn,) = svcs
    d = plan(svcs, {spn: EPS}, NODE)
    vs = d.services[("10.96.0.10", "TCP", 80)]
    assert vs.scheduler == "rr" and vs.dests == {("10.244.0.1", 8080, 1), ("10.244.0.2", 8080, 1)}
    assert d.services[("192.168.1.10", "TCP", 30080)].dests == vs.dests
    assert d.addresses == {"10.96.0.10"}
    assert d.ipsets["KUBE-CLUSTER-IP"] == {"10.96.0.10,tcp:80"}
    assert d.ipsets["KUBE-NODE-PORT-TCP"] == {"30080"}
    assert "10.244.0.1,tcp:8080,10.244.0.1" in d.ipsets["KUBE-LOOP-BACK"]


def test_local_policy_affinity_and_no_endpoints():
    svcs = ports(type="NodePort", externalTrafficPolicy="Local", sessionAffinity="ClientIP",
                 sessionAffinityConfig={"clientIP": {"timeoutSeconds": 30}})
    (spn,) = svcs
    d = plan(svcs, {spn: EPS}, NODE, scheduler="sh")
    np_vs = d.services[("192.168.1.10", "TCP", 30080)]
    assert np_vs.dests == {("10.244.0.1", 8080, 1)} and np_vs.persistence == 30 and np_vs.scheduler == "sh"
    assert d.ipsets["KUBE-NODE-PORT-LOCAL-TCP"] == {"30080"}
    empty = plan(svcs, {}, NODE)
    assert not empty.services and empty.addresses == {"10.96.0.10"}  # bound → the node itself rejects


def test_diff_orders_and_minimises():
    svcs = ports()
    (spn,) = svcs
    a = plan(svcs, {spn: EPS}, NODE)
    assert diff(a, a) == []
    ops = diff(Desired(), a)
    assert ops[0] == ("add-addr", "10.96.0.10")
    assert [o[0] for o in ops[1:4]] == ["add-vs", "add-dest", "add-dest"]
    b = plan(svcs, {spn: EPS[:1]}, NODE)
    assert diff(a, b) == [("del-dest", ("10.96.0.10", "TCP", 80), ("10.244.0.2", 8080, 1)),
                          ("del-entry", "KUBE-LOOP-BACK", "10.244.0.2,tcp:8080,10.244.0.2")]
    gone = plan({}, {}, NODE)
    kinds = [o[0] for o in diff(a, gone)]
    assert kinds.index("del-vs") < kinds.index("del-addr")


def test_fixed_rules_masquerade_by_ipset():
    text = iptables_rules(NODE)
    assert "--match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ" in text
    assert "! -s 10.244.0.0/16" in text and text.count("COMMIT") == 2  # nat, and filter (source ranges)


def test_sysctls_follow_kube_proxy():
    from netproxy.ipvs.proxier import wanted_sysctls

    modern = wanted_sysctls("6.1.0-27-amd64")
    assert modern["net/ipv4/vs/conntrack"] == "1" and modern["net/ipv4/vs/expire_nodest_conn"] == "1"
    assert "net/ipv4/vs/conn_reuse_mode" not in modern  # fixed in 5.9: left as the kernel has it
    assert wanted_sysctls("5.4.0-150-generic")["net/ipv4/vs/conn_reuse_mode"] == "0"
    assert "net/ipv4/conf/all/arp_ignore" not in modern  # strict ARP is opt-in, as in kube-proxy
    strict = wanted_sysctls("6.1.0-27-amd64", strict_arp=True)
    assert (strict["net/ipv4/conf/all/arp_ignore"], strict["net/ipv4/conf/all/arp_announce"]) == ("1", "2")


def test_ipvs_flags_reach_the_proxier():
    import argparse

    import pytest

    from netproxy.config import ProxyConfig
    from netproxy.ipvs.proxier import IpvsProxier
    from netproxy.service import proxier_options
    from nodeagent.commands.proxy import add_ipvs_arguments

    def config(mode, args):
        return ProxyConfig(mode=mode, ipvs_scheduler=args.ipvs_scheduler,
                           ipvs_strict_arp=args.ipvs_strict_arp)

    p = argparse.ArgumentParser()
    add_ipvs_arguments(p)
    assert proxier_options(config("ipvs", p.parse_args([]))) == {"scheduler": "rr", "strict_arp": "false"}
    args = p.parse_args(["--ipvs-scheduler", "sh", "--ipvs-strict-arp"])
    assert proxier_options(config("ipvs", args)) == {"scheduler": "sh", "strict_arp": "true"}
    assert proxier_options(config("nftables", args)) == {}
    proxier = IpvsProxier(NODE, **proxier_options(config("ipvs", args)))
    assert (proxier.scheduler, proxier.strict_arp) == ("sh", True)
    with pytest.raises(SystemExit):
        p.parse_args(["--ipvs-scheduler", "fifo"])
    with pytest.raises(ValueError, match="unknown IPVS scheduler 'fifo'"):
        IpvsProxier(NODE, scheduler="fifo")

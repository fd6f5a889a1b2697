"""A pod's resolv.conf by dnsPolicy, with dnsConfig merged and Kubernetes' limits applied."""

from __future__ import annotations

from nodeagent.kubelet.resolvconf import MAX_SEARCH_CHARS, parse_resolv_conf, pod_resolv_conf

HOST = """# generated
nameserver 192.0.2.53
nameserver 192.0.2.54
search corp.example lab.example.
options edns0 timeout:2
"""


def pod(policy: str | None = None, ns: str = "team", host_network: bool = False, dns_config=None) -> dict:
    spec: dict = {"containers": []}
    if policy:
        spec["dnsPolicy"] = policy
    if host_network:
        spec["hostNetwork"] = True
    if dns_config is not None:
        spec["dnsConfig"] = dns_config
    return {"metadata": {"name": "p", "namespace": ns}, "spec": spec}


def test_cluster_first_default_policy():
    rc = pod_resolv_conf(pod(), ["10.96.0.10"], "cluster.local", HOST)
    assert rc.render() == ("nameserver 10.96.0.10\n"
                           "search team.svc.cluster.local svc.cluster.local cluster.local "
                           "corp.example lab.example\n"
                           "options ndots:5\n")
    assert rc.warnings == []


def test_cluster_first_with_host_network_falls_back_to_host():
    rc = pod_resolv_conf(pod("ClusterFirst", host_network=True), ["10.96.0.10"], "cluster.local", HOST)
    assert rc.nameservers == ["192.0.2.53", "192.0.2.54"] and rc.options == ["edns0", "timeout:2"]
    rc2 = pod_resolv_conf(pod("ClusterFirstWithHostNet", host_network=True), ["10.96.0.10"],
                          "cluster.local", HOST)
    assert rc2.nameservers == ["10.96.0.10"] and rc2.searches[0] == "team.svc.cluster.local"


def test_default_is_the_hosts():
    rc = pod_resolv_conf(pod("Default"), ["10.96.0.10"], "cluster.local", HOST)
    assert rc.render() == ("nameserver 192.0.2.53\nnameserver 192.0.2.54\nsearch corp.example lab.example\n"
                           "options edns0 timeout:2\n")


def test_cluster_first_without_cluster_dns_falls_back_with_a_warning():
    rc = pod_resolv_conf(pod(), [], "cluster.local", HOST)
    assert rc.nameservers == ["192.0.2.53", "192.0.2.54"] and rc.warnings


def test_none_is_dns_config_only():
    cfg = {"nameservers": ["1.2.3.4"], "searches": ["ns1.svc.cluster-domain.example", "my.dns.search.suffix"],
           "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}
    rc = pod_resolv_conf(pod("None", dns_config=cfg), ["10.96.0.10"], "cluster.local", HOST)
    # the Kubernetes documentation's example
    assert rc.render() == ("nameserver 1.2.3.4\nsearch ns1.svc.cluster-domain.example my.dns.search.suffix\n"
                           "options ndots:2 edns0\n")
    assert pod_resolv_conf(pod("None"), ["10.96.0.10"], "cluster.local", HOST).render() == ""


def test_dns_config_merged_into_cluster_first():
    cfg = {"nameservers": ["10.96.0.10", "9.9.9.9"], "searches": ["extra.example", "svc.cluster.local"],
           "options": [{"name": "ndots", "value": "1"}, {"name": "single-request-reopen"}]}
    rc = pod_resolv_conf(pod(dns_config=cfg), ["10.96.0.10"], "cluster.local", HOST)
    assert rc.nameservers == ["10.96.0.10", "9.9.9.9"]  # duplicates dropped
    assert rc.searches == ["extra.example", "svc.cluster.local", "team.svc.cluster.local", "cluster.local",
                           "corp.example", "lab.example"]  # the pod's first
    assert rc.options == ["ndots:1", "single-request-reopen"]


def test_limits_nameservers_and_search():
    cfg = {"nameservers": ["1.1.1.1", "2.2.2.2", "3.3.3.3"], "searches": [f"d{i}.example" for i in range(40)]}
    rc = pod_resolv_conf(pod(dns_config=cfg), ["10.96.0.10"], "cluster.local", HOST)
    assert rc.nameservers == ["10.96.0.10", "1.1.1.1", "2.2.2.2"]
    assert len(rc.searches) == 32 and rc.searches[0] == "d0.example"
    assert len(rc.warnings) == 2
    long = {"searches": [("x" * 70 + f".s{i}") for i in range(31)]}
    rc2 = pod_resolv_conf(pod("None", dns_config=long), [], "cluster.local", HOST)
    assert len(" ".join(rc2.searches)) <= MAX_SEARCH_CHARS and len(rc2.searches) < 31 and rc2.warnings


def test_parse_resolv_conf_last_search_wins_and_comments():
    rc = parse_resolv_conf("domain a.example\nsearch b.example c.example # note\n; x\nnameserver ::1\n")
    assert rc.searches == ["b.example", "c.example"] and rc.nameservers == ["::1"]

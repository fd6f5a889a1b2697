"""NetworkPolicy enforced in the kernel, checked with real TCP connections between pod netnses.

The Kubernetes documentation's canonical examples (deny-all ingress, allow from a namespace, allow from
pods with a label on one port, egress to an ipBlock except a range) plus named ports, endPort, label
changes and conntrack replies, in both modes, on one node (pods on one bridge: br_netfilter inside the
node netns) and across two nodes (two node netnses joined by a routed link). Everything runs inside
test netnses; after each module's cleanup no chain, ipset or table of ours is left.
"""

from __future__ import annotations

import ipaddress

import pytest

from nodeagent.testing.netpol_lab import PolicyLab, policy
from tests.harness.resources import JANITOR

pytestmark = [pytest.mark.root]

DEFAULT_DENY_INGRESS = {"podSelector": {}, "policyTypes": ["Ingress"]}


@pytest.fixture(scope="module", params=[("iptables", 1), ("nftables", 1), ("iptables", 2), ("nftables", 2)],
                ids=["iptables-1node", "nftables-1node", "iptables-2nodes", "nftables-2nodes"])
def cl(request, host):
    mode, nodes = request.param
    if mode == "nftables" and not host.has("nftables"):
        pytest.skip(f"host lacks nftables: {host.why_not('nftables')}")
    c = PolicyLab(mode, nodes=nodes)
    key = f"netpol lab {id(c)}"
    JANITOR.register(key, c.close)
    try:
        far = "node2" if nodes == 2 else "node1"
        c.namespace("default")
        c.namespace("prod", {"project": "myproject"})
        c.namespace("other")
        c.add_pod("node1", "db", labels={"role": "db"}, tcp=(6379, 8080), named_ports={"redis": 6379})
        c.add_pod("node1", "other", labels={"role": "other"}, tcp=(8080,))
        c.add_pod(far, "frontend", labels={"role": "frontend"}, tcp=(8080,))
        c.add_pod("node1", "egress", labels={"app": "egress"}, tcp=(8080,))
        c.add_pod(far, "client", "prod", labels={"app": "client"})
        c.add_pod(far, "client", "other", labels={"app": "client"})
        c.sync()
        yield c
        c.cleanup()
        assert c.leftovers() == [], "netpol chains, sets or tables left after cleanup"
    finally:
        c.close()
        JANITOR.release(key)
        assert c.gone(), "test namespaces left behind"


@pytest.fixture(autouse=True)
def _reset(cl):
    yield
    cl.delete_all_policies()
    cl.relabel("default/other", {"role": "other"})
    cl.namespace("other")
    cl.sync()


def test_no_policy_allows_everything(cl):
    assert cl.connect("default/frontend", "default/db") == "ok"
    assert cl.connect("prod/client", "default/db", 6379) == "ok"
    assert cl.connect("default/db", "other/client") == "ok"


def test_default_deny_ingress(cl):
    cl.apply(policy("default-deny-ingress", "default", DEFAULT_DENY_INGRESS))
    cl.sync()
    assert cl.connect("default/frontend", "default/db") == "blocked"
    assert cl.connect("prod/client", "default/db") == "blocked"
    assert cl.connect("default/db", "default/other") == "blocked"
    # egress is not isolated, and the replies of an allowed flow come back in through conntrack
    assert cl.connect("default/db", "prod/client") == "ok"
    # other namespaces stay default-allow
    assert cl.connect("other/client", "prod/client") == "ok"
    cl.delete_policy("default/default-deny-ingress")
    cl.sync()
    assert cl.connect("default/frontend", "default/db") == "ok"


def test_allow_from_namespace(cl):
    cl.apply(policy("default-deny-ingress", "default", DEFAULT_DENY_INGRESS))
    cl.apply(policy("allow-prod", "default", {
        "podSelector": {"matchLabels": {"role": "db"}},
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"project": "myproject"}}}]}]}))
    cl.sync()
    assert cl.connect("prod/client", "default/db") == "ok"
    assert cl.connect("prod/client", "default/db", 6379) == "ok"
    assert cl.connect("other/client", "default/db") == "blocked"
    assert cl.connect("default/frontend", "default/db") == "blocked"  # same namespace, not selected
    # a namespace label change takes effect (only set elements change)
    cl.namespace("other", {"project": "myproject"})
    cl.sync()
    assert cl.connect("other/client", "default/db") == "ok"
    cl.namespace("other")
    cl.sync()
    assert cl.connect("other/client", "default/db") == "blocked"


def test_namespace_and_pod_selector_combined(cl):
    cl.apply(policy("and", "default", {
        "podSelector": {"matchLabels": {"role": "db"}},
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"project": "myproject"}},
                               "podSelector": {"matchLabels": {"app": "nothere"}}}]}]}))
    cl.sync()
    assert cl.connect("prod/client", "default/db") == "blocked"
    cl.apply(policy("and", "default", {
        "podSelector": {"matchLabels": {"role": "db"}},
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"project": "myproject"}},
                               "podSelector": {"matchLabels": {"app": "client"}}}]}]}))
    cl.sync()
    assert cl.connect("prod/client", "default/db") == "ok"
    assert cl.connect("other/client", "default/db") == "blocked"


def test_allow_from_pods_with_label_on_one_port(cl):
    cl.apply(policy("db-from-frontend", "default", {
        "podSelector": {"matchLabels": {"role": "db"}}, "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "frontend"}}}],
                     "ports": [{"protocol": "TCP", "port": 6379}]}]}))
    cl.sync()
    assert cl.connect("default/frontend", "default/db", 6379) == "ok"
    assert cl.connect("default/frontend", "default/db", 8080) == "blocked"
    assert cl.connect("default/other", "default/db", 6379) == "blocked"
    assert cl.connect("prod/client", "default/db", 6379) == "blocked"
    # pods not selected by the policy stay open
    assert cl.connect("default/other", "default/frontend") == "ok"


def test_pod_label_change_takes_effect(cl):
    cl.apply(policy("db-from-frontend", "default", {
        "podSelector": {"matchLabels": {"role": "db"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "frontend"}}}]}]}))
    cl.sync()
    assert cl.connect("default/other", "default/db") == "blocked"
    cl.relabel("default/other", {"role": "frontend"})
    ch = cl.enforcers["node1"].model.take_changes()
    assert not ch.chains_changed and not ch.new_sets, "a label change must only change set elements"
    cl.enforcers["node1"].model._changes = ch  # put it back for the sync
    cl.sync()
    assert cl.connect("default/other", "default/db") == "ok"
    cl.relabel("default/other", {"role": "other"})
    cl.sync()
    assert cl.connect("default/other", "default/db") == "blocked"
    # the target side: a pod that stops matching the podSelector is no longer isolated
    cl.relabel("default/db", {"role": "cache"})
    cl.sync()
    assert cl.connect("default/other", "default/db") == "ok"
    cl.relabel("default/db", {"role": "db"})
    cl.sync()
    assert cl.connect("default/other", "default/db") == "blocked"


def test_named_port_and_end_port(cl):
    cl.apply(policy("named", "default", {
        "podSelector": {"matchLabels": {"role": "db"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "frontend"}}}],
                     "ports": [{"port": "redis"}]}]}))
    cl.sync()
    assert cl.connect("default/frontend", "default/db", 6379) == "ok"
    assert cl.connect("default/frontend", "default/db", 8080) == "blocked"
    cl.apply(policy("named", "default", {
        "podSelector": {"matchLabels": {"role": "db"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "frontend"}}}],
                     "ports": [{"port": 6000, "endPort": 7000}]}]}))
    cl.sync()
    assert cl.connect("default/frontend", "default/db", 6379) == "ok"
    assert cl.connect("default/frontend", "default/db", 8080) == "blocked"


def _except_range(blocked: str, allowed: str) -> str:
    for prefix in (29, 30, 31, 32):
        net = ipaddress.ip_network(f"{blocked}/{prefix}", strict=False)
        if ipaddress.ip_address(allowed) not in net:
            return str(net)
    raise AssertionError("unreachable")


def test_egress_to_ip_block_except_a_range(cl):
    allowed, blocked = cl.ip("prod/client"), cl.ip("other/client")
    cidr = str(ipaddress.ip_network(f"{allowed}/16", strict=False))
    cl.apply(policy("egress-block", "default", {
        "podSelector": {"matchLabels": {"app": "egress"}}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"ipBlock": {"cidr": cidr, "except": [_except_range(blocked, allowed)]}}]}]}))
    cl.sync()
    assert cl.connect("default/egress", "prod/client") == "ok"
    assert cl.connect("default/egress", "other/client") == "blocked"
    # ingress to the egress-isolated pod is untouched
    assert cl.connect("default/frontend", "default/egress") == "ok"


def test_egress_named_port_to_pods(cl):
    cl.apply(policy("egress-redis", "default", {
        "podSelector": {"matchLabels": {"app": "egress"}}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"podSelector": {"matchLabels": {"role": "db"}}}],
                    "ports": [{"port": "redis"}]}]}))
    cl.sync()
    assert cl.connect("default/egress", "default/db", 6379) == "ok"
    assert cl.connect("default/egress", "default/db", 8080) == "blocked"
    assert cl.connect("default/egress", "default/frontend") == "blocked"


def test_full_resync_is_equivalent(cl):
    cl.apply(policy("db-from-frontend", "default", {
        "podSelector": {"matchLabels": {"role": "db"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "frontend"}}}]}]}))
    cl.sync()
    cl.sync(full=True)
    assert cl.connect("default/frontend", "default/db") == "ok"
    assert cl.connect("default/other", "default/db") == "blocked"

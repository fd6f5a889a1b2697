"""The policy model: selectors, isolation, ports, ipBlocks and incremental set updates (no kernel)."""

from __future__ import annotations

import pytest

from netpol.model import EGRESS, INGRESS, PolicyModel, cidr_minus, policy_types
from nodeagent.testing.netpol_lab import pod_object, policy


def model_with(*pods, namespaces=None, node="n1") -> PolicyModel:
    m = PolicyModel(node)
    for ns, labels in (namespaces or {"default": {}}).items():
        m.set_namespace(ns, {"kubernetes.io/metadata.name": ns, **labels})
    for p in pods:
        m.set_pod(f"{p['metadata']['namespace']}/{p['metadata']['name']}", p)
    return m


def target_of(m: PolicyModel, key: str) -> set[str]:
    return m.set_elements(m.policies[key].target_set())


def rset(m: PolicyModel, key: str, what: str = "peer", direction: str = INGRESS, rule: int = 0) -> str:
    """The set a rule's peers (`peer`) or ipBlocks (`cidr`) are matched with."""
    return m.policies[key].rule_sets[direction][rule][what]


def named_sets(m: PolicyModel, key: str, direction: str = INGRESS, rule: int = 0) -> list[str]:
    """The sets a rule's named ports are matched with, one per port name."""
    return m.policies[key].rule_sets[direction][rule]["named"]


def peers_of(m: PolicyModel, key: str, direction: str = INGRESS, rule: int = 0) -> set[str]:
    return m.set_elements(rset(m, key, "peer", direction, rule))


def test_policy_types_default_as_kubernetes():
    assert policy_types({}) == (INGRESS,)
    assert policy_types({"egress": [{}]}) == (INGRESS, EGRESS)
    assert policy_types({"policyTypes": ["Egress"], "ingress": [{}]}) == (EGRESS,)


def test_cidr_minus_except():
    assert cidr_minus("10.0.0.0/24", ["10.0.0.0/25"]) == ["10.0.0.128/25"]
    assert cidr_minus("10.0.0.0/30", ["10.0.0.1/32"]) == ["10.0.0.0/32", "10.0.0.2/31"]
    assert cidr_minus("10.0.0.0/24", ["10.0.0.0/16"]) == []
    assert cidr_minus("10.0.0.0/24", ["192.168.0.0/24"]) == ["10.0.0.0/24"]


def test_default_allow_until_selected_then_deny_for_that_direction_only():
    m = model_with(pod_object("a", "default", "10.0.0.1", "n1", {"app": "a"}),
                   pod_object("b", "default", "10.0.0.2", "n1", {"app": "b"}))
    assert m.isolated("default/a") == {INGRESS: False, EGRESS: False}
    m.set_policy("default/p", policy("p", "default", {"podSelector": {"matchLabels": {"app": "a"}}}))
    assert m.isolated("default/a") == {INGRESS: True, EGRESS: False}
    assert m.isolated("default/b") == {INGRESS: False, EGRESS: False}
    m.set_policy("default/q", policy("q", "default", {"podSelector": {}, "policyTypes": ["Egress"]}))
    assert m.isolated("default/b") == {INGRESS: False, EGRESS: True}
    m.set_policy("default/p", None)
    m.set_policy("default/q", None)
    assert m.isolated("default/a") == {INGRESS: False, EGRESS: False}
    assert m.set_elements("ING-ISO") == set() and m.set_elements("EGR-ISO") == set()


def test_only_local_pods_are_targets_but_every_pod_is_a_peer():
    m = model_with(pod_object("a", "default", "10.0.0.1", "n1", {"app": "x"}),
                   pod_object("b", "default", "10.0.1.1", "n2", {"app": "x"}))
    m.set_policy("default/p", policy("p", "default", {
        "podSelector": {"matchLabels": {"app": "x"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "x"}}}]}]}))
    assert target_of(m, "default/p") == {"10.0.0.1"}
    assert peers_of(m, "default/p") == {"10.0.0.1", "10.0.1.1"}


def test_namespace_selector_pod_selector_and_both():
    pods = [pod_object("c", "prod", "10.0.0.3", "n1", {"app": "client"}),
            pod_object("d", "prod", "10.0.0.4", "n1", {"app": "other"}),
            pod_object("e", "dev", "10.0.0.5", "n1", {"app": "client"}),
            pod_object("f", "default", "10.0.0.6", "n1", {"app": "client"})]
    m = model_with(*pods, namespaces={"default": {}, "prod": {"env": "prod"}, "dev": {"env": "dev"}})
    m.set_policy("default/ns", policy("ns", "default", {
        "podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"env": "prod"}}}]}]}))
    m.set_policy("default/pod", policy("pod", "default", {
        "podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]}]}))
    m.set_policy("default/and", policy("and", "default", {
        "podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "dev"]}]},
            "podSelector": {"matchLabels": {"app": "client"}}}]}]}))
    m.set_policy("default/or", policy("or", "default", {
        "podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"env": "dev"}}},
                                                 {"podSelector": {"matchLabels": {"app": "client"}}}]}]}))
    assert peers_of(m, "default/ns") == {"10.0.0.3", "10.0.0.4"}
    assert peers_of(m, "default/pod") == {"10.0.0.6"}  # podSelector alone: the policy's namespace only
    assert peers_of(m, "default/and") == {"10.0.0.3", "10.0.0.5"}
    assert peers_of(m, "default/or") == {"10.0.0.5", "10.0.0.6"}
    # a namespace label change re-evaluates only that namespace's pods, as element changes
    m.take_changes()
    m.set_namespace("dev", {"kubernetes.io/metadata.name": "dev", "env": "prod"})
    ch = m.take_changes()
    assert not ch.chains_changed and not ch.new_sets
    assert peers_of(m, "default/ns") == {"10.0.0.3", "10.0.0.4", "10.0.0.5"}
    assert peers_of(m, "default/or") == {"10.0.0.6"}
    assert ch.added[rset(m, "default/ns")] == {"10.0.0.5"}


def test_pod_label_change_is_only_element_updates():
    m = model_with(pod_object("db", "default", "10.0.0.1", "n1", {"role": "db"}),
                   pod_object("fe", "default", "10.0.0.2", "n1", {"role": "x"}))
    m.set_policy("default/p", policy("p", "default", {
        "podSelector": {"matchLabels": {"role": "db"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "frontend"}}}]}]}))
    first = m.take_changes()
    assert first.full and first.chains_changed
    m.set_pod("default/fe", pod_object("fe", "default", "10.0.0.2", "n1", {"role": "frontend"}))
    ch = m.take_changes()
    peer = rset(m, "default/p")
    assert ch.added == {peer: {"10.0.0.2"}} and not any(ch.removed.values())
    assert not ch.chains_changed and not ch.full
    m.set_pod("default/fe", pod_object("fe", "default", "10.0.0.2", "n1", {"role": "x"}))
    m.set_pod("default/fe", pod_object("fe", "default", "10.0.0.2", "n1", {"role": "frontend"}))
    assert m.take_changes().empty()  # flapping back and forth between syncs cancels out
    m.set_pod("default/fe", None)
    ch = m.take_changes()
    assert ch.removed == {peer: {"10.0.0.2"}}


def test_named_ports_resolve_per_destination_pod():
    m = model_with(pod_object("a", "default", "10.0.0.1", "n1", {"app": "web"}, {"http": 8080}),
                   pod_object("b", "default", "10.0.0.2", "n1", {"app": "web"}, {"http": 9090}),
                   pod_object("c", "default", "10.0.0.3", "n1", {"app": "web"}))
    m.set_policy("default/p", policy("p", "default", {
        "podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"ports": [{"port": "http"}]}],
        "egress": [{"to": [{"podSelector": {}}], "ports": [{"port": "http", "protocol": "TCP"}]}]}))
    (ing,) = named_sets(m, "default/p")
    (egr,) = named_sets(m, "default/p", EGRESS)
    assert m.set_elements(ing) == {"10.0.0.1,tcp,8080", "10.0.0.2,tcp,9090"}
    assert m.set_elements(egr) == {"10.0.0.1,tcp,8080", "10.0.0.2,tcp,9090"}
    lines = m.policies["default/p"].lines[INGRESS]
    assert len(lines) == 1 and lines[0].peer_set is None and lines[0].port and lines[0].port.named_set == ing


def test_ip_block_except_and_numeric_ports():
    m = model_with()
    m.set_policy("default/p", policy("p", "default", {
        "podSelector": {}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/24", "except": ["10.0.0.128/25"]}}],
                    "ports": [{"port": 53, "protocol": "UDP"}, {"port": 8000, "endPort": 8100}]}]}))
    p = m.policies["default/p"]
    assert m.set_elements(rset(m, "default/p", "cidr", EGRESS)) == {"10.0.0.0/25"}
    ports = [ln.port and (ln.port.protocol, ln.port.port, ln.port.end_port) for ln in p.lines[EGRESS]]
    assert ports == [("udp", 53, None), ("tcp", 8000, 8100)]
    assert INGRESS not in p.lines


def test_empty_rules_mean_deny_and_missing_peers_mean_anyone():
    m = model_with(pod_object("a", "default", "10.0.0.1", "n1", {}))
    m.set_policy("default/deny", policy("deny", "default", {"podSelector": {}, "ingress": []}))
    assert m.policies["default/deny"].lines[INGRESS] == []
    m.set_policy("default/all", policy("all", "default", {"podSelector": {}, "ingress": [{}]}))
    (line,) = m.policies["default/all"].lines[INGRESS]
    assert line.peer_set is None and line.port is None


def test_policy_update_replaces_its_sets_and_chains():
    m = model_with(pod_object("a", "default", "10.0.0.1", "n1", {"app": "a"}))
    m.set_policy("default/p", policy("p", "default", {"podSelector": {"matchLabels": {"app": "a"}}}))
    old = m.policies["default/p"]
    m.take_changes()
    m.set_policy("default/p", policy("p", "default", {"podSelector": {"matchLabels": {"app": "a"}}}))
    assert m.take_changes().empty()  # same spec: nothing to write
    m.set_policy("default/p", policy("p", "default", {"podSelector": {"matchLabels": {"app": "b"}}}))
    ch = m.take_changes()
    new = m.policies["default/p"]
    assert new.pid != old.pid and old.target_set() in ch.gone_sets and new.target_set() in ch.new_sets
    assert m.set_elements(old.target_set()) == set()
    assert old.chain(INGRESS) in ch.gone_chains and new.chain(INGRESS) in ch.dirty_chains
    assert m.isolated("default/a")[INGRESS] is False


@pytest.mark.parametrize("status", [{"phase": "Pending"}, {"phase": "Succeeded", "podIP": "10.0.0.9"}])
def test_pods_without_ip_or_finished_are_ignored(status):
    pod = pod_object("a", "default", "10.0.0.1", "n1", {})
    pod["status"] = status
    m = model_with(pod)
    assert m.pods == {}


def test_backends_render_without_a_kernel():
    from netpol.iptables import IptablesBackend
    from netpol.nftables import NftablesBackend

    m = model_with(pod_object("a", "default", "10.0.0.1", "n1", {"app": "a"}, {"http": 8080}))
    m.set_policy("default/p", policy("p", "default", {
        "podSelector": {}, "ingress": [{"from": [{"podSelector": {}}, {"ipBlock": {"cidr": "1.2.3.0/24"}}],
                                        "ports": [{"port": "http"}, {"port": 80, "endPort": 90}]}]}))
    peer, cidr = rset(m, "default/p", "peer"), rset(m, "default/p", "cidr")
    (named,) = named_sets(m, "default/p")
    chains = IptablesBackend(backend="legacy")._all_chains(m)
    rules = "\n".join(r for c in chains.values() for r in c)
    assert f"--match-set NA-NP-{peer} src -p tcp -m set --match-set NA-NP-{named} dst,dst" in rules
    assert f"--match-set NA-NP-{cidr} src -p tcp -m tcp --dport 80:90" in rules
    script = NftablesBackend()._full(m)
    assert f"ip saddr @{cidr.lower().replace('-', '_')} meta l4proto tcp th dport 80-90" in script
    assert "10.0.0.1 . tcp . 8080" in script


def test_policies_with_the_same_selectors_share_sets_until_the_last_goes():
    m = model_with(pod_object("a", "default", "10.0.0.1", "n1", {"app": "a"}),
                   pod_object("b", "default", "10.0.0.2", "n1", {"role": "fe"}))
    spec = {"podSelector": {"matchLabels": {"app": "a"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "fe"}}}]}]}
    m.set_policy("default/p1", policy("p1", "default", spec))
    m.set_policy("default/p2", policy("p2", "default", spec | {"policyTypes": ["Ingress", "Egress"]}))
    assert rset(m, "default/p1") == rset(m, "default/p2")
    assert m.policies["default/p1"].target_set() == m.policies["default/p2"].target_set()
    assert m.isolated("default/a") == {INGRESS: True, EGRESS: True}
    m.take_changes()
    m.set_policy("default/p2", None)
    ch = m.take_changes()
    assert ch.gone_sets == set() and ch.removed == {"EGR-ISO": {"10.0.0.1"}}
    assert m.isolated("default/a") == {INGRESS: True, EGRESS: False}
    m.set_policy("default/p1", None)
    ch = m.take_changes()
    assert len(ch.gone_sets) == 2  # the shared target and peer sets
    assert m.defs == {} and m.set_elements("ING-ISO") == set()


def test_policies_with_one_target_share_one_chain_and_one_dispatch_rule():
    from netpol.iptables import IptablesBackend

    m = model_with(pod_object("a", "default", "10.0.0.1", "n1", {"app": "a"}))
    sel = {"podSelector": {"matchLabels": {"app": "a"}}}
    m.set_policy("default/p1", policy("p1", "default", sel | {"ingress": [{"ports": [{"port": 80}]}]}))
    m.set_policy("default/p2", policy("p2", "default", sel | {"ingress": [{"ports": [{"port": 81}]}]}))
    b = IptablesBackend(backend="legacy")
    chains = b._all_chains(m)
    chain = b.chain_name(m.policies["default/p1"].chain(INGRESS))
    assert len(chains[chain]) == 2 and len(chains[b.dispatch[INGRESS]]) == 2  # one jump + the isolation rule
    m.take_changes()
    m.set_policy("default/p1", None)
    ch = m.take_changes()
    assert ch.dirty_chains == {m.policies["default/p2"].chain(INGRESS)} and not ch.gone_chains
    m.set_policy("default/p2", None)
    ch = m.take_changes()
    assert ch.gone_chains and not ch.dirty_chains

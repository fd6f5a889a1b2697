"""Cache: assume / confirm / forget, node removal, the snapshot's node list and indexes."""

import pytest

from nodeagent.scheduler.cache import Cache
from nodeagent.scheduler.framework import PodInfo
from nodeagent.testing.clock import FakeClock
from nodeagent.testing.fake_cluster import make_node, make_pod


def test_assume_counts_the_pod_then_the_api_add_confirms_it():
    c = Cache()
    c.add_node(make_node("n", cpu="2"))
    pod = make_pod("p", cpu="1")
    assumed = PodInfo(pod).with_node("n")
    c.assume_pod(assumed)
    assert c.is_assumed(assumed.uid) and c.nodes["n"].req_cpu == 1000
    with pytest.raises(ValueError):
        c.assume_pod(assumed)
    bound = dict(pod, spec=dict(pod["spec"], nodeName="n"))
    c.add_pod(bound)
    assert not c.is_assumed(assumed.uid) and c.nodes["n"].req_cpu == 1000 and len(c.nodes["n"].pods) == 1


def test_forget_undoes_assume():
    c = Cache()
    c.add_node(make_node("n", cpu="2"))
    assumed = PodInfo(make_pod("p", cpu="1")).with_node("n")
    c.assume_pod(assumed)
    c.forget_pod(assumed)
    assert c.nodes["n"].req_cpu == 0 and not c.nodes["n"].pods and not c.is_assumed(assumed.uid)


def test_confirmation_on_another_node_moves_the_pod():
    c = Cache()
    c.add_node(make_node("a"))
    c.add_node(make_node("b"))
    pod = make_pod("p", cpu="1")
    c.assume_pod(PodInfo(pod).with_node("a"))
    c.add_pod(dict(pod, spec=dict(pod["spec"], nodeName="b")))
    assert c.nodes["a"].req_cpu == 0 and c.nodes["b"].req_cpu == 1000


def test_assumed_pods_expire_only_with_a_ttl_after_binding_finished():
    clock = FakeClock()
    c = Cache(clock, assumed_ttl=30)
    c.add_node(make_node("n"))
    p = PodInfo(make_pod("p", cpu="1")).with_node("n")
    c.assume_pod(p)
    clock.advance(100)
    assert c.cleanup_expired_assumed() == []  # binding not finished
    c.finish_binding(p.uid)
    clock.advance(31)
    assert [x.uid for x in c.cleanup_expired_assumed()] == [p.uid] and c.nodes["n"].req_cpu == 0


def test_snapshot_tracks_nodes_and_affinity_indexes():
    c = Cache()
    c.add_node(make_node("a"))
    c.add_node(make_node("b", taints=[{"key": "k", "effect": "NoSchedule"}]))
    s = c.snapshot()
    assert [n.name for n in s.nodes] == ["a", "b"] and s.any_filter_taints and not s.any_unschedulable
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"x": "y"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    pod = make_pod("p", node="a", affinity=anti)
    c.add_pod(pod)
    assert [n.name for n in c.snapshot().nodes_with_required_anti_affinity()] == ["a"]
    c.remove_pod(pod)
    assert c.snapshot().nodes_with_required_anti_affinity() == []
    c.update_node(make_node("b"))
    assert not c.snapshot().any_filter_taints
    c.remove_node("a")
    assert [n.name for n in c.snapshot().nodes] == ["b"]


def test_removed_node_keeps_its_pods_until_they_go():
    c = Cache()
    c.add_node(make_node("a"))
    pod = make_pod("p", cpu="1", node="a")
    c.add_pod(pod)
    c.remove_node("a")
    assert c.snapshot().nodes == [] and c.nodes["a"].req_cpu == 1000
    c.remove_pod(pod)
    assert "a" not in c.nodes


def test_nodes_with_affinity_lists_only_pods_whose_terms_score_others():
    # InterPodAffinity's PreScore reads existing pods' required affinity and preferred terms, never their
    # required anti-affinity: nodes holding only the latter are left out of its walk
    term = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
    c = Cache()
    for n in ("a", "b"):
        c.add_node(make_node(n))
    c.add_pod(make_pod("anti", node="a", affinity={"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [term]}}))
    pref = c.add_pod(make_pod("pref", node="b", affinity={"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "podAffinityTerm": term}]}}))
    snap = c.snapshot()
    assert [n.name for n in snap.nodes_with_affinity()] == ["b"]
    assert [n.name for n in snap.nodes_with_required_anti_affinity()] == ["a"]
    c.remove_pod(pref.pod)
    assert snap.nodes_with_affinity() == []

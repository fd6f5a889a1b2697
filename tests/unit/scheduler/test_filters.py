"""Each filter rejects exactly the nodes it should, with kube-scheduler's reason strings."""

import copy

from nodeagent.scheduler.framework.status import Code
from nodeagent.testing.fake_cluster import make_node, make_pod

from .helpers import Env


def test_node_name():
    env = Env([make_node("a"), make_node("b")])
    assert env.filter_all("NodeName", make_pod("p", nodeName="b")) == {
        "a": "node(s) didn't match the requested node name", "b": ""}
    assert env.filter_all("NodeName", make_pod("q")) == {"a": "", "b": ""}


def test_node_ports_conflicts_by_protocol_port_and_ip():
    def with_port(name, port, proto="TCP", ip=None, node=None):
        p = make_pod(name, node=node)
        pp = {"containerPort": 80, "hostPort": port, "protocol": proto}
        if ip:
            pp["hostIP"] = ip
        p["spec"]["containers"][0]["ports"] = [pp]
        return p

    env = Env([make_node("a"), make_node("b"), make_node("c")],
              [with_port("x", 8080, node="a"), with_port("y", 8080, ip="10.0.0.1", node="b")])
    r = "node(s) didn't have free ports for the requested pod ports"
    assert env.filter_all("NodePorts", with_port("p", 8080)) == {"a": r, "b": r, "c": ""}
    assert env.filter_all("NodePorts", with_port("p", 8080, ip="10.0.0.2")) == {"a": r, "b": "", "c": ""}
    assert env.filter_all("NodePorts", with_port("p", 8080, proto="UDP")) == {"a": "", "b": "", "c": ""}
    assert env.filter_all("NodePorts", with_port("p", 9090)) == {"a": "", "b": "", "c": ""}


def test_node_resources_fit_reasons():
    env = Env([make_node("small", cpu="1", memory="1Gi", pods=2, ephemeral="1Gi",
                         extra={"example.com/gpu": "1"}),
               make_node("big", cpu="8", memory="16Gi", pods=110, ephemeral="100Gi",
                         extra={"example.com/gpu": "4"})],
              [make_pod("e1", cpu="500m", node="small"), make_pod("e2", node="small")])
    fit = "NodeResourcesFit"
    assert env.filter_all(fit, make_pod("p", cpu="600m")) == {"small": "Too many pods", "big": ""}
    s = env.filter(fit, make_pod("p", cpu="600m", memory="2Gi"), "small")
    assert s is not None and s.code == Code.UNSCHEDULABLE
    assert s.reasons == ("Too many pods", "Insufficient cpu", "Insufficient memory")
    gpu = make_pod("g")
    gpu["spec"]["containers"][0]["resources"] = {"requests": {"example.com/gpu": "2",
                                                              "ephemeral-storage": "2Gi"}}
    env2 = Env([make_node("small", extra={"example.com/gpu": "1"}, ephemeral="1Gi"),
                make_node("big", extra={"example.com/gpu": "4"}, ephemeral="10Gi")])
    s = env2.filter(fit, gpu, "small")
    assert s is not None and s.reasons == ("Insufficient ephemeral-storage", "Insufficient example.com/gpu")
    assert env2.filter(fit, gpu, "big") is None


def test_node_resources_fit_counts_init_containers_like_kubernetes():
    env = Env([make_node("n", cpu="1")])
    p = make_pod("p", cpu="200m")
    p["spec"]["initContainers"] = [{"name": "i", "image": "x", "resources": {"requests": {"cpu": "1500m"}}}]
    s = env.filter("NodeResourcesFit", p, "n")
    assert s is not None and s.reasons == ("Insufficient cpu",)
    p["spec"]["initContainers"][0]["resources"]["requests"]["cpu"] = "900m"
    assert env.filter("NodeResourcesFit", p, "n") is None


def test_node_affinity_selector_and_required_terms():
    env = Env([make_node("a", labels={"zone": "z1", "disk": "ssd"}), make_node("b", labels={"zone": "z2"}),
               make_node("c")])
    r = "node(s) didn't match Pod's node affinity/selector"
    assert env.filter_all("NodeAffinity", make_pod("p", nodeSelector={"zone": "z1"})) == {
        "a": "", "b": r, "c": r}
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]},
        {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}]}}}
    assert env.filter_all("NodeAffinity", make_pod("p", affinity=aff)) == {"a": "", "b": "", "c": r}
    # nodeSelector and affinity are ANDed
    assert env.filter_all("NodeAffinity", make_pod("p", affinity=aff, nodeSelector={"zone": "z2"})) == {
        "a": r, "b": "", "c": r}
    fields = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]}]}}}
    assert env.filter_all("NodeAffinity", make_pod("p", affinity=fields)) == {"a": r, "b": r, "c": ""}
    assert env.filter("NodeAffinity", make_pod("p"), "c") is None


def test_node_affinity_verdicts_follow_node_label_updates_within_a_run_of_one_shape():
    """A run of pods of one shape reads the last verdicts back; a node's relabel is seen at once."""
    env = Env([make_node("a", labels={"zone": "z1"}), make_node("b", labels={"zone": "z2"})])
    r = "node(s) didn't match Pod's node affinity/selector"
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]}}}
    assert env.filter_all("NodeAffinity", make_pod("p1", affinity=aff)) == {"a": "", "b": r}
    assert env.filter_all("NodeAffinity", make_pod("p2", affinity=aff)) == {"a": "", "b": r}
    env.cluster.update_node(make_node("a", labels={"zone": "z2"}))
    env.cluster.update_node(make_node("b", labels={"zone": "z1"}))
    assert env.filter_all("NodeAffinity", make_pod("p3", affinity=aff)) == {"a": r, "b": ""}
    # another shape in between, then the first again: nothing stale is read back
    assert env.filter_all("NodeAffinity", make_pod("q", nodeSelector={"zone": "z2"})) == {"a": "", "b": r}
    env.cluster.update_node(make_node("a", labels={"zone": "z1"}))
    assert env.filter_all("NodeAffinity", make_pod("p4", affinity=aff)) == {"a": "", "b": ""}


def test_taint_toleration_filters_no_schedule_and_no_execute_only():
    env = Env([make_node("ns", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
               make_node("ne", taints=[{"key": "evict", "effect": "NoExecute"}]),
               make_node("pref", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]),
               make_node("clean")])
    assert env.filter_all("TaintToleration", make_pod("p")) == {
        "ns": "node(s) had untolerated taint {dedicated: gpu}",
        "ne": "node(s) had untolerated taint {evict: }",
        "pref": "", "clean": ""}
    tol = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    got = env.filter_all("TaintToleration", make_pod("p", tolerations=tol))
    assert got["ns"] == "" and got["ne"] != ""
    tolerant = make_pod("p", tolerations=[{"operator": "Exists"}])
    assert set(env.filter_all("TaintToleration", tolerant).values()) == {""}
    wrong_value = [{"key": "dedicated", "operator": "Equal", "value": "cpu"}]
    assert env.filter("TaintToleration", make_pod("p", tolerations=wrong_value), "ns") is not None
    s = env.filter("TaintToleration", make_pod("p"), "ns")
    assert s is not None and s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_node_conditions_taint_the_node():
    env = Env([make_node("sick", conditions=[{"type": "Ready", "status": "False"}]),
               make_node("full", conditions=[{"type": "Ready", "status": "True"},
                                             {"type": "DiskPressure", "status": "True"}]),
               make_node("ok")])
    assert env.filter_all("TaintToleration", make_pod("p")) == {
        "sick": "node(s) had untolerated taint {node.kubernetes.io/not-ready: }",
        "full": "node(s) had untolerated taint {node.kubernetes.io/disk-pressure: }", "ok": ""}


def test_node_unschedulable():
    env = Env([make_node("cordoned", unschedulable=True), make_node("ok")])
    assert env.filter_all("NodeUnschedulable", make_pod("p")) == {
        "cordoned": "node(s) were unschedulable", "ok": ""}
    tol = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
    assert env.filter_all("NodeUnschedulable", make_pod("p", tolerations=tol)) == {"cordoned": "", "ok": ""}


def _zones(n=4):
    return [make_node(f"n{i}", labels={"zone": f"z{i // 2}"}) for i in range(n)]  # z0: n0,n1  z1: n2,n3


def test_inter_pod_affinity_required():
    env = Env(_zones(), [make_pod("db", labels={"app": "db"}, node="n0")])
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}]}}
    r = "node(s) didn't match pod affinity rules"
    assert env.filter_all("InterPodAffinity", make_pod("web", affinity=aff)) == {
        "n0": "", "n1": "", "n2": r, "n3": r}
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}]}}
    r = "node(s) didn't match pod anti-affinity rules"
    assert env.filter_all("InterPodAffinity", make_pod("web", affinity=anti)) == {
        "n0": r, "n1": r, "n2": "", "n3": ""}
    # other namespaces don't count unless named
    elsewhere = make_pod("w", namespace="other", affinity=anti)
    assert set(env.filter_all("InterPodAffinity", elsewhere).values()) == {""}


def test_inter_pod_affinity_first_pod_of_a_self_selecting_group_goes_anywhere():
    env = Env(_zones())
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}]}}
    first = make_pod("w", labels={"app": "web"}, affinity=aff)
    assert set(env.filter_all("InterPodAffinity", first).values()) == {""}
    # a pod that doesn't match its own terms must wait for a match
    assert set(env.filter_all("InterPodAffinity", make_pod("w", affinity=aff)).values()) == {
        "node(s) didn't match pod affinity rules"}


def test_existing_pods_anti_affinity_is_honoured():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"team": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    env = Env(_zones(), [make_pod("loner", node="n1", affinity=anti)])
    r = "node(s) didn't satisfy existing pods anti-affinity rules"
    assert env.filter_all("InterPodAffinity", make_pod("p", labels={"team": "x"})) == {
        "n0": "", "n1": r, "n2": "", "n3": ""}
    assert set(env.filter_all("InterPodAffinity", make_pod("p", labels={"team": "y"})).values()) == {""}


def test_pod_topology_spread_do_not_schedule():
    pods = [make_pod(f"a{i}", labels={"app": "a"}, node=n) for i, n in enumerate(["n0", "n1", "n0"])]
    env = Env(_zones() + [make_node("nolabel")], pods)
    c = [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
          "labelSelector": {"matchLabels": {"app": "a"}}}]
    r = "node(s) didn't match pod topology spread constraints"
    # z0 has 3 matching pods, z1 has 0: placing in z0 gives skew 4 > 1
    spread = make_pod("p", labels={"app": "a"}, topologySpreadConstraints=c)
    assert env.filter_all("PodTopologySpread", spread) == {
        "n0": r, "n1": r, "n2": "", "n3": "", "nolabel": r + " (missing required label)"}
    c[0]["maxSkew"] = 4
    got = env.filter_all("PodTopologySpread", make_pod("p", labels={"app": "a"}, topologySpreadConstraints=c))
    assert got["n0"] == "" and got["n2"] == ""
    soft = [dict(c[0], whenUnsatisfiable="ScheduleAnyway", maxSkew=1)]
    assert env.filter("PodTopologySpread", make_pod("p", labels={"app": "a"}, topologySpreadConstraints=soft),
                      "n0") is None


def test_inter_pod_affinity_counts_every_pod_when_many_share_labels_and_terms():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    nodes = [make_node(f"n{i}", labels={"zone": f"z{i // 2}"}) for i in range(6)]
    env = Env(nodes,
              [make_pod(f"db{i}", labels={"app": "db"}, affinity=anti, node=f"n{i}") for i in (0, 2, 3)])
    r_mine = "node(s) didn't match pod anti-affinity rules"
    assert env.filter_all("InterPodAffinity", make_pod("x", labels={"app": "db"}, affinity=anti)) == {
        "n0": r_mine, "n1": "", "n2": r_mine, "n3": r_mine, "n4": "", "n5": ""}
    r_theirs = "node(s) didn't satisfy existing pods anti-affinity rules"
    assert env.filter_all("InterPodAffinity", make_pod("y", labels={"app": "db"})) == {
        "n0": r_theirs, "n1": "", "n2": r_theirs, "n3": r_theirs, "n4": "", "n5": ""}
    # in another namespace the same labels match nothing (the terms default to their pods' namespace)
    other_ns = make_pod("z", namespace="b", labels={"app": "db"})
    assert set(env.filter_all("InterPodAffinity", other_ns).values()) == {""}
    # preemption what-ifs keep the counts consistent
    pe_state, pi = env._prep(make_pod("x", labels={"app": "db"}, affinity=anti))
    plugin = env.plugin("InterPodAffinity")
    plugin.pre_filter(pe_state, pi)
    n0 = env.sched.cache.nodes["n0"]
    victim = next(iter(n0.pods.values()))
    plugin.remove_pod(pe_state, pi, victim, n0)
    assert plugin.filter(pe_state, pi, n0) is None
    plugin.add_pod(pe_state, pi, victim, n0)
    assert plugin.filter(pe_state, pi, n0).reasons == (r_mine,)


def test_pod_topology_spread_what_ifs_update_the_global_minimum():
    nodes = [make_node(f"n{i}") for i in range(3)]
    pods = [make_pod("a0", labels={"app": "a"}, node="n0"), make_pod("a1", labels={"app": "a"}, node="n1")]
    env = Env(nodes, pods)
    c = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
          "labelSelector": {"matchLabels": {"app": "a"}}}]
    state, pi = env._prep(make_pod("p", labels={"app": "a"}, topologySpreadConstraints=c))
    plugin = env.plugin("PodTopologySpread")
    plugin.pre_filter(state, pi)
    n0, n2 = env.sched.cache.nodes["n0"], env.sched.cache.nodes["n2"]
    assert plugin.filter(state, pi, n0) is not None and plugin.filter(state, pi, n2) is None
    filler = next(iter(n0.pods.values()))
    plugin.add_pod(state, pi, filler, n2)  # n2 now has one too: minimum becomes 1
    assert plugin.filter(state, pi, n0) is None
    plugin.remove_pod(state, pi, filler, n2)
    assert plugin.filter(state, pi, n0) is not None


def _resized(pod, cpu):
    """The same pod (uid, node) with its container's cpu request changed (an in-place resize)."""
    new = copy.deepcopy(pod)
    new["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    return new


def test_node_resources_fit_follows_every_change_of_a_nodes_free_resources():
    # the filter reads NodeInfo's free_* aggregates (allocatable minus requested, pod slots left): a pod
    # bound or removed, a bound pod's requests changing, the node's allocatable changing and a preemption
    # what-if on a clone must each move them
    env = Env([make_node("a", cpu="1", memory="4Gi", pods=3)])
    pod = make_pod("p", cpu="600m", memory="1Gi")

    def verdict() -> str:
        return env.filter_all("NodeResourcesFit", pod)["a"]
    assert verdict() == ""
    x = env.cluster.add_pod(make_pod("x", cpu="600m", memory="1Gi", node="a"))
    assert verdict() == "Insufficient cpu"
    env.cluster.update_pod(_resized(x, "300m"))  # the bound pod's requests shrink
    assert verdict() == ""
    env.cluster.update_pod(_resized(x, "500m"))
    assert verdict() == "Insufficient cpu"
    env.cluster.remove_pod(x["metadata"]["uid"])
    assert verdict() == ""
    env.cluster.update_node(make_node("a", cpu="500m", memory="4Gi", pods=3))  # allocatable shrinks
    assert verdict() == "Insufficient cpu"
    env.cluster.update_node(make_node("a", cpu="2", memory="4Gi", pods=1))
    assert verdict() == ""
    y = env.cluster.add_pod(make_pod("y", node="a"))  # a best-effort pod takes the last pod slot
    assert verdict() == "Too many pods"
    ni = env.sched.cache.nodes["a"]
    c = ni.clone()
    state, pi = env._prep(pod)
    fit = env.plugin("NodeResourcesFit")
    fit.pre_filter(state, pi)
    assert [s.reasons for _, s in fit.filter_many(state, pi, [c])[1]] == [("Too many pods",)]
    placed = env.sched.cache.get_pod(y["metadata"]["uid"])
    assert placed is not None
    c.remove_pod(placed)  # preemption's what-if on a copy
    assert fit.filter_many(state, pi, [c])[0] == [c]
    assert fit.filter_many(state, pi, [ni])[0] == []  # the original is untouched

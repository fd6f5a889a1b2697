"""Each score orders nodes as specified and stays within 0..100 after normalization."""

from nodeagent.testing.fake_cluster import make_node, make_pod

from .helpers import Env


def _loaded():
    return Env([make_node("empty", cpu="4", memory="8Gi"), make_node("half", cpu="4", memory="8Gi"),
                make_node("full", cpu="4", memory="8Gi")],
               [make_pod("h", cpu="2", memory="4Gi", node="half"),
                make_pod("f", cpu="3", memory="6Gi", node="full")])


def test_least_allocated_prefers_emptier_nodes():
    s = _loaded().scores("NodeResourcesFit", make_pod("p", cpu="500m", memory="1Gi"))
    assert s["empty"] > s["half"] > s["full"]
    # (4000-500)*100//4000 = 87 cpu, (8-1)*100//8 = 87 memory
    assert s["empty"] == 87


def test_most_allocated_is_opt_in_and_prefers_fuller_nodes():
    cfg = {"profiles": [{"schedulerName": "default-scheduler", "pluginConfig": [
        {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}]}]}
    env = _loaded()
    env2 = Env([make_node("empty", cpu="4", memory="8Gi"), make_node("full", cpu="4", memory="8Gi")],
               [make_pod("f", cpu="3", memory="6Gi", node="full")], config=cfg)
    s = env2.scores("NodeResourcesFit", make_pod("p", cpu="500m", memory="1Gi"))
    assert s is not None and s["full"] > s["empty"]
    assert env.plugin("NodeResourcesFit").most is False


def test_pods_without_requests_score_with_non_zero_defaults():
    s = _loaded().scores("NodeResourcesFit", make_pod("p"))
    assert s["empty"] > s["full"]


def test_balanced_allocation_prefers_even_cpu_memory_use():
    env = Env([make_node("cpu-heavy", cpu="4", memory="8Gi"), make_node("even", cpu="4", memory="8Gi")],
              [make_pod("c", cpu="3", memory="1Gi", node="cpu-heavy"),
               make_pod("e", cpu="1", memory="2Gi", node="even")])
    s = env.scores("NodeResourcesBalancedAllocation", make_pod("p", cpu="1", memory="2Gi"))
    assert s is not None and s["even"] == 100 and s["even"] > s["cpu-heavy"]
    assert env.scores("NodeResourcesBalancedAllocation", make_pod("besteffort")) is None  # skipped


def test_preferred_node_affinity_weights():
    env = Env([make_node("a", labels={"disk": "ssd", "zone": "z1"}), make_node("b", labels={"disk": "ssd"}),
               make_node("c")])
    aff = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10,
         "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}},
        {"weight": 30, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}}]}}
    assert env.scores("NodeAffinity", make_pod("p", affinity=aff)) == {"a": 100, "b": 25, "c": 0}
    assert env.scores("NodeAffinity", make_pod("p")) is None


def test_taint_toleration_prefers_fewer_untolerated_prefer_no_schedule():
    env = Env([make_node("two", taints=[{"key": "a", "effect": "PreferNoSchedule"},
                                       {"key": "b", "effect": "PreferNoSchedule"}]),
               make_node("one", taints=[{"key": "a", "effect": "PreferNoSchedule"}]), make_node("none")])
    assert env.scores("TaintToleration", make_pod("p")) == {"two": 0, "one": 50, "none": 100}
    tol = [{"key": "a", "operator": "Exists", "effect": "PreferNoSchedule"}]
    assert env.scores("TaintToleration", make_pod("p", tolerations=tol)) == {
        "two": 0, "one": 100, "none": 100}


def test_preferred_inter_pod_affinity_and_anti_affinity():
    nodes = [make_node(f"n{i}", labels={"zone": f"z{i}"}) for i in range(3)]
    env = Env(nodes, [make_pod("cache", labels={"app": "cache"}, node="n0"),
                      make_pod("noisy", labels={"app": "noisy"}, node="n1")])
    near = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "zone"}
    away = {"labelSelector": {"matchLabels": {"app": "noisy"}}, "topologyKey": "zone"}
    aff = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
               {"weight": 50, "podAffinityTerm": near}]},
           "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
               {"weight": 50, "podAffinityTerm": away}]}}
    assert env.scores("InterPodAffinity", make_pod("p", affinity=aff)) == {"n0": 100, "n1": 0, "n2": 50}


def test_existing_pods_preferred_terms_attract_the_incoming_pod():
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    aff = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
               {"weight": 20, "podAffinityTerm": term}]}}
    env = Env([make_node("a"), make_node("b")], [make_pod("lonely", node="b", affinity=aff)])
    assert env.scores("InterPodAffinity", make_pod("p", labels={"app": "web"})) == {"a": 0, "b": 100}


def test_topology_spread_schedule_anyway_prefers_less_crowded_domains():
    nodes = [make_node(f"n{i}", labels={"zone": f"z{i % 2}"}) for i in range(4)]
    pods = [make_pod(f"a{i}", labels={"app": "a"}, node="n0") for i in range(3)]
    env = Env(nodes, pods)
    c = [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
          "labelSelector": {"matchLabels": {"app": "a"}}}]
    s = env.scores("PodTopologySpread", make_pod("p", labels={"app": "a"}, topologySpreadConstraints=c))
    assert s is not None and s["n1"] == s["n3"] == 100 and s["n0"] == s["n2"] < 100


def test_default_spreading_applies_to_pods_selected_by_a_service():
    env = Env([make_node("a"), make_node("b")],
              [make_pod("w1", labels={"app": "web"}, node="a"),
               make_pod("w2", labels={"app": "web"}, node="a")])
    assert env.scores("PodTopologySpread", make_pod("p", labels={"app": "web"})) is None  # no owner: skipped
    env.cluster.add_service("default", {"app": "web"})
    s = env.scores("PodTopologySpread", make_pod("p", labels={"app": "web"}))
    assert s is not None and s["b"] == 100 and s["a"] < 100


def test_image_locality_prefers_nodes_with_big_images():
    big = 500 * 1024 * 1024
    env = Env([make_node("has", images=[(["registry.k8s.io/app:1"], big)]),
               make_node("small", images=[(["registry.k8s.io/app:1"], 10 * 1024 * 1024)]),
               make_node("none")])
    s = env.scores("ImageLocality", make_pod("p", image="registry.k8s.io/app:1"))
    assert s is not None and s["has"] > s["small"] == s["none"] == 0
    assert env.scores("ImageLocality", make_pod("p", image="other:2")) is None


def test_resource_scores_of_a_run_of_one_shape_follow_every_node_change():
    # the second pod of a shape scores from the per-node cache: a node that took a pod, lost one, or was
    # replaced by a new NodeInfo of the same name must be scored afresh, the rest read back unchanged
    from nodeagent.scheduler.framework import CycleState, NodeInfo, PodInfo
    from nodeagent.scheduler.plugins import balancedallocation, noderesourcesfit

    nodes = [NodeInfo(make_node(f"n{i}", cpu="4", memory="8Gi")) for i in range(4)]
    fit, bal = noderesourcesfit.new(None, None), balancedallocation.new(None, None)
    fresh_fit, fresh_bal = noderesourcesfit.new(None, None), balancedallocation.new(None, None)
    pod = PodInfo(make_pod("p", cpu="500m", memory="1Gi"))
    st = CycleState()

    def check() -> None:  # the caching plugins against new ones (whose first call never caches)
        assert fit.score_many(st, pod, nodes) == noderesourcesfit.new(None, None).score_many(st, pod, nodes)
        assert bal.score_many(st, pod, nodes) == balancedallocation.new(None, None).score_many(st, pod, nodes)
    check()
    check()  # every node read from the cache
    placed = PodInfo(make_pod("a", cpu="3", memory="1Gi", node="n1"))
    nodes[1].add_pod(placed)
    check()
    nodes[1].remove_pod(placed)
    nodes[2].add_pod(PodInfo(make_pod("b", cpu="1", memory="6Gi", node="n2")))
    check()
    nodes[3] = NodeInfo(make_node("n3", cpu="2", memory="2Gi"))  # same name, a new node
    check()
    other = PodInfo(make_pod("q", cpu="1", memory="100Mi"))  # a new shape: scored without the cache
    assert fit.score_many(st, other, nodes) == fresh_fit.score_many(st, other, nodes)
    assert bal.score_many(st, other, nodes) == fresh_bal.score_many(st, other, nodes)
    assert len({s for s in bal.score_many(st, pod, nodes)}) > 1


def test_framework_score_totals_of_a_run_of_one_shape_follow_every_node_and_pod_change():
    # run_score keeps the weighted totals per node while every active score plugin names the pod's shape:
    # a pod bound, removed or resized on a node, the node's allocatable changing and a node replaced by a
    # new one of the same name must each be scored afresh; a pod of another shape is not read from them
    import copy

    env = Env([make_node(f"n{i}", cpu="4", memory="8Gi") for i in range(4)])
    fw = env.fw
    fit, bal = env.plugin("NodeResourcesFit"), env.plugin("NodeResourcesBalancedAllocation")
    shape = make_pod("p", cpu="500m", memory="1Gi")

    def check(pod=None) -> list[int]:
        state, pi = env._prep(pod or shape)
        nodes = list(env.sched.cache.snapshot().nodes)
        assert fw.run_pre_score(state, pi, nodes) is None
        got = fw.run_score(state, pi, nodes)
        assert got == [fit.score(state, pi, n) + bal.score(state, pi, n) for n in nodes]
        return got
    check()
    first = check()
    assert len(fw._totals._scores) == 4  # the second pod of the shape cached every node's total
    a = env.cluster.add_pod(make_pod("a", cpu="3", memory="1Gi", node="n1"))
    assert check()[1] < first[1]
    resized = copy.deepcopy(a)
    resized["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    env.cluster.update_pod(resized)
    check()
    env.cluster.remove_pod(a["metadata"]["uid"])
    assert check() == first
    env.cluster.update_node(make_node("n2", cpu="2", memory="8Gi"))
    check()
    env.cluster.delete_node("n3")
    env.cluster.add_node(make_node("n3", cpu="8", memory="2Gi"))
    check()
    check(make_pod("q", cpu="1", memory="100Mi"))
    check()

"""The cycle memo (verdicts and score totals by node position for a run of one pod shape) places every pod
where the general walk would, through every change that can alter a node's answer."""

import copy
import random

from nodeagent.scheduler.cyclememo import CycleMemo
from nodeagent.scheduler.profile import SchedulerConfig
from nodeagent.scheduler.scheduler import Scheduler
from nodeagent.testing.clock import FakeClock
from nodeagent.testing.fake_cluster import FakeCluster, make_node, make_pod

N_NODES = 300  # past 100 nodes the adaptive percentage walks a window (144 at 300) from a rotating start


def _node(i, cpu="1", pods=4, labels=None, **kw):
    return make_node(f"n{i}", cpu=cpu, memory="4Gi", pods=pods, labels=labels or {"zone": f"z{i % 3}"}, **kw)


def _shape(k, i):
    """Pods of a few shapes, in runs: requests, best-effort, a node selector, a toleration."""
    name = f"p{k}-{i}"
    if k % 4 == 0:
        return make_pod(name, cpu="300m", memory="500Mi")
    if k % 4 == 1:
        return make_pod(name)
    if k % 4 == 2:
        return make_pod(name, cpu="200m", memory="1Gi", nodeSelector={"zone": "z1"})
    return make_pod(name, cpu="100m", memory="100Mi",
                    tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}])


async def _placements(memo: bool) -> tuple[list[tuple[str, str | None]], int, int, int]:
    """Run one scenario; (pod, node) in creation order, how many cycles the memo answered (and of those,
    with pods nominated to nodes), and the preemptions."""
    cluster = FakeCluster()
    s = Scheduler(SchedulerConfig(), cluster.api(), clock=FakeClock(), rng=random.Random(3))
    cluster.subscribe(s)
    used = [0, 0]
    for m in s.memos.values():
        real = m.find_feasible

        def counted(*a, real=real):
            if not memo:
                return None
            got = real(*a)
            answered = got is not None and bool(got[0])
            used[0] += answered
            used[1] += answered and bool(s.queue.nominated)
            return got
        m.find_feasible = counted  # type: ignore[method-assign]
    for i in range(N_NODES):
        cluster.add_node(_node(i))
        if i % 3:  # two nodes in three nearly full of low-priority pods: the high-priority ones preempt
            for x in range(3):
                cluster.add_pod(make_pod(f"low{i}-{x}", cpu="300m", memory="100Mi", node=f"n{i}"))
    created = []
    rnd = random.Random(11)
    for k in range(12):
        for i in range(60):
            created.append(cluster.add_pod(_shape(k, i)))
        await s.drain()
        for x in range(2):  # high-priority pods: when nothing fits they preempt, and stay nominated (the
            created.append(cluster.add_pod(make_pod(f"hp{k}-{x}", cpu="900m", priority=10)))  # clock stands)
        await s.drain()
        bound = [p for p in cluster.pods.values() if p["spec"].get("nodeName")]
        # what can change a node's answer between runs of one shape:
        for p in rnd.sample(bound, 10):  # pods deleted
            cluster.remove_pod(p["metadata"]["uid"])
        for p in rnd.sample([p for p in bound if p["metadata"]["uid"] in cluster.pods
                             and p["spec"]["containers"][0].get("resources")], 5):  # a bound pod resized
            new = copy.deepcopy(p)
            new["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "900m"
            cluster.update_pod(new)
        j = rnd.randrange(N_NODES)
        cluster.update_node(_node(j, cpu="2", pods=6))  # allocatable grows
        cluster.update_node(_node((j + 1) % N_NODES, labels={"zone": "z1"}))  # labels
        cluster.update_node(_node((j + 2) % N_NODES, unschedulable=True))  # cordoned
        cluster.update_node(_node((j + 3) % N_NODES, taints=[
            {"key": "dedicated", "value": "x", "effect": "NoSchedule"}]))
        if k % 3 == 2:  # a node added and one deleted (a new node list)
            cluster.add_node(_node(N_NODES + k))
            cluster.delete_node(f"n{(j + 4) % N_NODES}")
        await s.drain()
        for _ in range(3):  # the next run of the same shape starts mid-window
            created.append(cluster.add_pod(_shape(k, 1000 + _)))
            await s.drain()
    return ([(p["metadata"]["name"], cluster.node_of(p["metadata"]["name"])) for p in created], used[0],
            used[1], s.stats["preemptions"])


async def test_the_memo_places_every_pod_where_the_general_walk_does():
    general, _, _, preempted = await _placements(memo=False)
    memoized, answered, with_nominated, preempted_too = await _placements(memo=True)
    assert answered > 500  # most cycles came from the memo
    assert with_nominated > 50  # many of them with pods nominated to nodes
    assert preempted == preempted_too > 0
    assert sum(1 for _, n in general if n is None) > 0  # some pods found no room: the general path's FitError
    assert memoized == general


def test_changed_nodes_forget_their_answers_and_a_new_node_list_resets():
    from nodeagent.scheduler.cache import Cache

    cache = Cache()
    for i in range(3):
        cache.add_node(_node(i))
    memo = CycleMemo(cache)
    snap = cache.snapshot()
    memo._sync(snap.nodes)
    memo._fit[:] = [True, True, True]
    memo._tot[:] = [1, 2, 3]
    cache.assume_pod(PodInfoOn("a", "n1"))
    memo._sync(cache.snapshot().nodes)
    assert memo._fit == [True, None, True] and memo._tot == [1, None, 3]
    memo._fit[1], memo._tot[1] = True, 2
    cache.update_node(_node(2, cpu="2"))
    memo._sync(cache.snapshot().nodes)
    assert memo._fit == [True, True, None]
    cache.add_node(_node(3))
    memo._sync(cache.snapshot().nodes)
    assert memo._fit == [None] * 4 and memo._tot == [None] * 4
    memo._fit[:] = [True] * 4
    cache.MAX_CHANGES = 2  # the log dropped past the memo's place: everything is forgotten
    for i in range(3):
        cache.assume_pod(PodInfoOn(f"b{i}", "n0"))
    memo._sync(cache.snapshot().nodes)
    assert memo._fit == [None] * 4


def PodInfoOn(name, node):
    from nodeagent.scheduler.framework.types import PodInfo

    return PodInfo(make_pod(name, cpu="100m", node=node))


async def test_inter_pod_affinity_counts_kept_across_a_run_are_a_fresh_walks():
    # PreFilter's counts follow the nodes the cache reports changed (interpodaffinity/counts.py): after
    # binds, deletes, label changes and node replacements they must equal a fresh walk's, and the pods
    # land where fresh counts put them
    from nodeagent.scheduler.plugins.interpodaffinity.counts import RunCounts

    def anti(name, color, ns="default"):
        return make_pod(name, cpu="100m", namespace=ns, labels={"color": color}, affinity={
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"color": color}}, "topologyKey": "zone"}]},
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "rack"}]}})

    async def run(fresh: bool) -> tuple[list[str | None], int]:
        cluster = FakeCluster()
        s = Scheduler(SchedulerConfig(), cluster.api(), clock=FakeClock(), rng=random.Random(5))
        cluster.subscribe(s)
        plugin = next(iter(s.frameworks.values())).plugins["InterPodAffinity"]
        checks = [0]
        rc = plugin._counts

        def follow(snap, pod, nsl):
            if fresh:  # forget everything: a fresh walk each cycle
                RunCounts.__init__(rc)
            RunCounts.follow(rc, snap, pod, nsl)
            again = RunCounts()
            again.follow(snap, pod, nsl)
            assert (rc.existing, rc.affinity, rc.anti) == (again.existing, again.affinity, again.anti)
            assert rc.existing_keys >= again.existing_keys
            checks[0] += 1
        rc.follow = follow
        for i in range(40):
            cluster.add_node(make_node(f"n{i}", labels={"zone": f"z{i % 20}", "rack": f"r{i % 5}"}))
        for i in range(5):
            cluster.add_pod(make_pod(f"db{i}", labels={"app": "db"}, node=f"n{i * 3}"))
        names = []
        rnd = random.Random(2)
        for k in range(8):
            for i in range(12):
                color = "c0" if k < 6 else "c1"  # one shape over several rounds of changes
                names.append(cluster.add_pod(anti(f"a{k}-{i}", color))["metadata"]["name"])
            await s.drain()
            bound = [p for p in cluster.pods.values() if p["spec"].get("nodeName")
                     and p["metadata"]["name"].startswith("a")]
            for p in rnd.sample(bound, min(4, len(bound))):
                cluster.remove_pod(p["metadata"]["uid"])
            placed = sorted({n for p in cluster.pods.values() if (n := p["spec"].get("nodeName"))})
            j = int(rnd.choice(placed)[1:]) if placed else 0  # a node with pods moves zone and rack
            cluster.update_node(make_node(f"n{j}", labels={"zone": f"z{(j + k) % 20}", "rack": "r0"}))
            if k % 3 == 1:
                cluster.delete_node(f"n{(j + 1) % 40}")
                cluster.add_node(make_node(f"n{(j + 1) % 40}", labels={"zone": "z9", "rack": "r1"}))
            await s.drain()
        return [cluster.node_of(n) for n in names], checks[0]

    fresh, _ = await run(fresh=True)
    kept, checked = await run(fresh=False)
    assert checked > 80
    assert sum(1 for n in fresh if n is None) > 0 and sum(1 for n in fresh if n) > 10
    assert kept == fresh


async def test_a_node_taken_for_dead_between_two_pods_of_one_shape_gets_none_of_the_second():
    """The 3-node lab's node-failure test, scheduler side: pods that tolerate the unreachable NoExecute taint
    for a while were placed on n2 while n0 and n1 were cordoned (the memo keeps n2 feasible for their shape);
    n0 and n1 are uncordoned, n2 goes Ready=Unknown, first without its taints (the scheduler derives
    unreachable:NoSchedule from the condition), then with them: the replacements of that shape land on n0 or
    n1, never on n2, whose NoSchedule taint they do not tolerate."""
    tolerate = [{"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
                for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]
    unknown = [{"type": "Ready", "status": "Unknown"}]
    unreachable = [{"key": "node.kubernetes.io/unreachable", "effect": effect} for effect in
                   ("NoExecute", "NoSchedule")]
    for node3_then in ({"conditions": unknown}, {"conditions": unknown, "taints": unreachable}):
        cluster = FakeCluster()
        s = Scheduler(SchedulerConfig(), cluster.api(), clock=FakeClock(), rng=random.Random(3))
        cluster.subscribe(s)
        for i in range(2):
            cluster.add_node(_node(i, unschedulable=True))
        cluster.add_node(_node(2, cpu="16"))  # the roomiest: the scores alone would pick it
        for i in range(2):
            cluster.add_pod(make_pod(f"old{i}", tolerations=tolerate))
        await s.drain()
        assert {cluster.node_of(f"old{i}") for i in range(2)} == {"n2"}
        for i in range(2):
            cluster.update_node(_node(i))
        cluster.update_node(_node(2, cpu="16", **node3_then))
        for i in range(4):
            cluster.add_pod(make_pod(f"new{i}", tolerations=tolerate))
            await s.drain()
        assert {cluster.node_of(f"new{i}") for i in range(4)} <= {"n0", "n1"}, node3_then

"""DefaultPreemption: candidate nodes, minimal victims, PDBs, policy, and the pick among nodes."""

from nodeagent.scheduler.framework import CycleState
from nodeagent.scheduler.plugins.defaultpreemption import parse_pdbs, split_by_pdb
from nodeagent.testing.fake_cluster import make_node, make_pod

from .helpers import Env


def victims_on(env, pod, node):
    pe = env.plugin("DefaultPreemption")
    state, pi = env._prep(pod)
    env.fw.run_pre_filter(state, pi)
    v, nviol, s = pe.select_victims(state, pi, env.sched.cache.nodes[node], parse_pdbs(env.cluster.pdbs()))
    return [p.name for p in v], nviol, s


def test_minimal_victims_most_important_reprieved_first():
    env = Env([make_node("n", cpu="4")], [
        make_pod("low1", cpu="1", priority=1, node="n"),
        make_pod("low2", cpu="1", priority=2, node="n"),
        make_pod("low3", cpu="2", priority=1, node="n"),
        make_pod("peer", cpu="0", priority=10, node="n")])
    before = env.sched.cache.nodes["n"].req_cpu
    victims, nviol, s = victims_on(env, make_pod("hi", cpu="2", priority=10), "n")
    assert s is None and victims == ["low3"] and nviol == 0
    assert env.sched.cache.nodes["n"].req_cpu == before and len(env.sched.cache.nodes["n"].pods) == 4


def test_no_victims_when_nothing_has_lower_priority_or_it_cannot_help():
    env = Env([make_node("n", cpu="2")], [make_pod("same", cpu="2", priority=5, node="n")])
    _, _, s = victims_on(env, make_pod("p", cpu="1", priority=5), "n")
    assert s.reasons == ("No preemption victims found for incoming pod",)
    env2 = Env([make_node("n", cpu="2")], [make_pod("low", cpu="1", priority=0, node="n")])
    _, _, s = victims_on(env2, make_pod("p", cpu="3", priority=5), "n")
    assert s.reasons == ("Insufficient cpu",)


def test_pdb_split_consumes_budgets_in_order():
    pods = [make_pod(f"w{i}", labels={"app": "w"}) for i in range(3)]
    pdb = {"metadata": {"namespace": "default"}, "spec": {"selector": {"matchLabels": {"app": "w"}}},
           "status": {"disruptionsAllowed": 1}}
    from nodeagent.scheduler.framework import PodInfo
    infos = [PodInfo(p) for p in pods]
    violating, ok = split_by_pdb(infos, parse_pdbs([pdb]))
    assert [p.name for p in ok] == ["w0"] and [p.name for p in violating] == ["w1", "w2"]
    empty = dict(pdb, spec={"selector": {}})
    assert split_by_pdb(infos, parse_pdbs([empty]))[0] == []


async def test_preemption_prefers_the_node_without_pdb_violations():
    env = Env([make_node("a", cpu="2"), make_node("b", cpu="2")], [
        make_pod("guarded", cpu="2", priority=1, labels={"app": "db"}, node="a"),
        make_pod("free", cpu="2", priority=1, labels={"app": "batch"}, node="b")])
    env.cluster.add_pdb({"metadata": {"name": "db", "namespace": "default"},
                         "spec": {"selector": {"matchLabels": {"app": "db"}}},
                         "status": {"disruptionsAllowed": 0}})
    env.cluster.add_pod(make_pod("hi", cpu="2", priority=100))
    await env.sched.drain()
    assert env.cluster.deleted == ["free"]
    assert env.cluster.pod("hi")["status"]["nominatedNodeName"] == "b"


async def test_preemption_prefers_lowest_priority_then_fewest_victims():
    env = Env([make_node("a", cpu="2"), make_node("b", cpu="2"), make_node("c", cpu="2")], [
        make_pod("a-mid", cpu="2", priority=50, node="a"),
        make_pod("b-low1", cpu="1", priority=1, node="b"), make_pod("b-low2", cpu="1", priority=1, node="b"),
        make_pod("c-low", cpu="2", priority=1, node="c")])
    env.cluster.add_pod(make_pod("hi", cpu="2", priority=100))
    await env.sched.drain()
    assert env.cluster.deleted == ["c-low"]  # same top priority as b, but one victim instead of two
    assert [e["message"] for e in env.cluster.events_for("c-low", "Preempted")] == [
        f"Preempted by pod {env.cluster.pod('hi')['metadata']['uid']} on node c"]


async def test_preemption_policy_never_and_pdb_free_violation_when_unavoidable():
    env = Env([make_node("a", cpu="1")], [make_pod("low", cpu="1", priority=0, node="a")])
    env.cluster.add_pod(make_pod("polite", cpu="1", priority=100, preemptionPolicy="Never"))
    await env.sched.drain()
    assert env.cluster.deleted == []
    assert env.cluster.events_for("polite", "FailedScheduling")[-1]["message"] == (
        "0/1 nodes are available: 1 Insufficient cpu. not eligible due to preemptionPolicy=Never.")
    # with a PDB that allows nothing, the only candidate is still taken (violations are minimized,
    # not forbidden)
    env.cluster.add_pdb({"metadata": {"name": "x", "namespace": "default"},
                         "spec": {"selector": {"matchLabels": {"app": "x"}}},
                         "status": {"disruptionsAllowed": 0}})
    env2 = Env([make_node("a", cpu="1")],
               [make_pod("low", cpu="1", priority=0, labels={"app": "x"}, node="a")])
    env2.cluster.pdb_objs = env.cluster.pdb_objs
    env2.cluster.add_pod(make_pod("hi", cpu="1", priority=100))
    await env2.sched.drain()
    assert env2.cluster.deleted == ["low"]


def test_candidate_count_follows_kubernetes_defaults():
    pe = Env([make_node("a")]).plugin("DefaultPreemption")
    assert pe.num_candidates(50) == 50 and pe.num_candidates(500) == 100 and pe.num_candidates(5000) == 500
    assert CycleState().clone() == {}


def test_pick_one_criteria_in_order():
    from nodeagent.scheduler.framework import PodInfo
    from nodeagent.scheduler.plugins.defaultpreemption import Candidate, pick_one

    def v(prio, start):
        p = make_pod(f"v{prio}{start}", priority=prio)
        p["status"]["startTime"] = start
        return PodInfo(p)

    a = Candidate("a", [v(5, "2026-01-01T00:00:00Z")], 1)
    b = Candidate("b", [v(9, "2026-01-01T00:00:00Z")], 0)
    assert pick_one([a, b]).node == "b"  # PDB violations first
    c = Candidate("c", [v(3, "2026-01-01T00:00:00Z"), v(3, "2026-01-01T00:00:01Z")], 0)
    d = Candidate("d", [v(4, "2026-01-01T00:00:00Z")], 0)
    assert pick_one([d, c]).node == "c"  # then the lowest highest-priority victim
    e = Candidate("e", [v(3, "2026-01-01T00:00:00Z")], 0)
    assert pick_one([c, e]).node == "e"  # then the lowest priority sum
    f = Candidate("f", [v(3, "2026-01-01T00:05:00Z")], 0)
    assert pick_one([e, f]).node == "f"  # then the latest start among the top victims
    assert pick_one([e, Candidate("g", list(e.victims), 0)]).node == "e"  # then the first


def test_arithmetic_dry_run_agrees_with_the_generic_what_if():
    import random

    from nodeagent.scheduler.plugins.defaultpreemption import _DryRun

    rng = random.Random(11)
    for trial in range(30):
        nodes = [make_node(f"n{i}", cpu=str(rng.choice([2, 4, 8])), memory=f"{rng.choice([4, 8])}Gi",
                           pods=rng.choice([3, 5, 110])) for i in range(4)]
        pods = []
        for i in range(rng.randint(4, 16)):
            pods.append(make_pod(f"t{trial}p{i}", cpu=f"{rng.choice([100, 500, 900, 1500])}m",
                                 memory=f"{rng.choice([100, 500, 2000])}Mi",
                                 priority=rng.choice([0, 1, 5, 20]),
                                 labels={"app": rng.choice(["a", "b"])}, node=f"n{rng.randrange(4)}"))
        env = Env(nodes, pods)
        if trial % 2:
            env.cluster.pdb_objs.append({"metadata": {"namespace": "default"},
                                         "spec": {"selector": {"matchLabels": {"app": "a"}}},
                                         "status": {"disruptionsAllowed": rng.randint(0, 2)}})
        incoming = make_pod("hi", cpu=f"{rng.choice([500, 1500, 3000])}m", memory="1Gi", priority=10)
        pe = env.plugin("DefaultPreemption")
        state, pi = env._prep(incoming)
        env.fw.run_pre_filter(state, pi)
        pdbs = parse_pdbs(env.cluster.pdbs())
        for n in nodes:
            ni = env.sched.cache.nodes[n["metadata"]["name"]]
            before = (ni.req_cpu, ni.req_mem, len(ni.pods))
            results = []
            for arithmetic in (True, False):
                dry = _DryRun(env.fw, state)
                dry.use_arithmetic = arithmetic
                assert dry.arithmetic("NodeResourcesFit", pi, [], []) == arithmetic
                v, nviol, s = pe.select_victims(state, pi, ni, pdbs, "NodeResourcesFit", dry)
                results.append(([p.name for p in v], nviol, s.reasons if s else None))
            assert results[0] == results[1], (trial, n["metadata"]["name"])
            assert (ni.req_cpu, ni.req_mem, len(ni.pods)) == before


def _full_cluster(n_nodes, pdb_allowed=None):
    """n nodes of 4 cpu, each holding four 900m low-priority pods (scheduler_perf's PreemptionBasic)."""
    pods = [make_pod(f"low-{i}-{j}", cpu="900m", priority=0, labels={"app": "low"}, node=f"n{i}")
            for i in range(n_nodes) for j in range(4)]
    env = Env([make_node(f"n{i}", cpu="4") for i in range(n_nodes)], pods)
    if pdb_allowed is not None:
        env.cluster.add_pdb({"metadata": {"name": "low", "namespace": "default"},
                             "spec": {"selector": {"matchLabels": {"app": "low"}}},
                             "status": {"disruptionsAllowed": pdb_allowed}})
    return env


def _count_dry_runs(env):
    pe = env.plugin("DefaultPreemption")
    calls = []
    real = pe.select_victims

    def counted(state, pod, ni, *a, **kw):
        calls.append(ni.name)
        return real(state, pod, ni, *a, **kw)
    pe.select_victims = counted
    return calls


async def test_dry_runs_stop_at_the_candidate_limit_from_a_random_offset():
    env = _full_cluster(300)
    calls = _count_dry_runs(env)
    env.cluster.add_pod(make_pod("hi", cpu="3", priority=10))
    await env.sched.drain()
    # 10% of 300 is below the absolute minimum of 100: exactly 100 nodes are dry-run, consecutively
    assert len(calls) == 100 and len(set(calls)) == 100
    idx = [int(n[1:]) for n in calls]
    assert all((b - a) % 300 == 1 for a, b in zip(idx, idx[1:], strict=False))
    # three 900m victims on one node (3.6 of 4 cpu used; the 3-cpu pod needs three of them gone)
    assert len(env.cluster.deleted) == 3 and len({d.split("-")[1] for d in env.cluster.deleted}) == 1
    assert f"n{env.cluster.deleted[0].split('-')[1]}" in calls
    other = _full_cluster(300)
    other.sched.rng.seed(99)
    calls2 = _count_dry_runs(other)
    other.cluster.add_pod(make_pod("hi", cpu="3", priority=10))
    await other.sched.drain()
    assert calls2[0] != calls[0]  # the offset is random (different seed, different start)


async def test_dry_runs_go_on_while_every_candidate_violates_a_pdb():
    env = _full_cluster(150, pdb_allowed=0)
    calls = _count_dry_runs(env)
    env.cluster.add_pod(make_pod("hi", cpu="3", priority=10))
    await env.sched.drain()
    # no candidate without PDB violations: kube-scheduler keeps looking, so every node is tried
    assert len(calls) == 150
    assert len(env.cluster.deleted) == 3  # still minimal: three victims, on one node


async def test_pdb_protected_pods_are_reprieved_before_others():
    pods = [make_pod("guarded", cpu="1", priority=0, labels={"app": "db"}, node="a"),
            make_pod("plain1", cpu="1", priority=0, labels={"app": "x"}, node="a"),
            make_pod("plain2", cpu="1", priority=0, labels={"app": "x"}, node="a")]
    env = Env([make_node("a", cpu="3")], pods)
    env.cluster.add_pdb({"metadata": {"name": "db", "namespace": "default"},
                         "spec": {"selector": {"matchLabels": {"app": "db"}}},
                         "status": {"disruptionsAllowed": 0}})
    env.cluster.add_pod(make_pod("hi", cpu="2", priority=10))
    await env.sched.drain()
    assert sorted(env.cluster.deleted) == ["plain1", "plain2"]


def test_nominated_pods_on_request_sums_agree_with_placing_them():
    import random

    rng = random.Random(5)
    for trial in range(40):
        env = Env([make_node("a", cpu=str(rng.choice([2, 4])), memory="4Gi", pods=rng.choice([3, 110]))],
                  [make_pod(f"b{trial}-{i}", cpu=f"{rng.choice([100, 900])}m", memory="500Mi", node="a")
                   for i in range(rng.randint(0, 2))])
        for i in range(rng.randint(1, 2)):
            nom = env.sched._pod_info(make_pod(f"nom{trial}-{i}", cpu=f"{rng.choice([200, 1000, 2000])}m",
                                               memory="1Gi", priority=rng.choice([0, 10])))
            env.sched.queue.add_nominated(nom, "a")
        state, pi = env._prep(make_pod("p", cpu=f"{rng.choice([100, 500, 1000])}m", memory="1Gi",
                                       priority=rng.choice([0, 5])))
        env.fw.run_pre_filter(state, pi)
        filters = env.fw.active_filters(state)
        ni = env.sched.cache.nodes["a"]
        before = (ni.req_cpu, ni.req_mem, len(ni.pods))
        dep = env.fw.pod_dependent(filters, None)
        assert env.sched._arith_ok(env.fw, state, pi, dep)
        got = [env.sched._fits_with_nominated(env.fw, state, pi, ni, filters, None, dep, arith)
               for arith in (True, False)]
        assert got[0] == got[1], trial
        assert (ni.req_cpu, ni.req_mem, len(ni.pods)) == before


async def test_not_eligible_while_a_lower_priority_pod_on_the_nominated_node_terminates():
    low = make_pod("low", cpu="2", priority=0, node="a")
    low["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"  # preempted earlier, still terminating
    env = Env([make_node("a", cpu="2"), make_node("b", cpu="2")],
              [low, make_pod("other", cpu="2", priority=0, node="b")])
    hi = make_pod("hi", cpu="2", priority=10)
    hi["status"]["nominatedNodeName"] = "a"
    env.cluster.add_pod(hi)
    await env.sched.drain()
    assert env.cluster.deleted == []  # waits for the terminating pod rather than preempting on b
    assert env.cluster.events_for("hi", "FailedScheduling")[-1]["message"] == (
        "0/2 nodes are available: 2 Insufficient cpu. "
        "not eligible due to a terminating pod on the nominated node.")


def test_pick_one_equals_staged_narrowing_on_random_candidates():
    import random

    from nodeagent.scheduler.framework import PodInfo
    from nodeagent.scheduler.plugins.defaultpreemption import Candidate, by_importance, pick_one

    def staged(cands):  # kube-scheduler's pickOneNodeForPreemption, one criterion at a time
        def narrow(cs, key):
            best = min(key(c) for c in cs)
            return [c for c in cs if key(c) == best]
        cs = narrow(cands, lambda c: c.num_pdb_violations)
        cs = narrow(cs, lambda c: c.victims[0].priority)
        cs = narrow(cs, lambda c: sum(v.priority + 2**31 + 1 for v in c.victims))
        cs = narrow(cs, lambda c: len(c.victims))
        starts = [min(v.start_time for v in c.victims if v.priority == c.victims[0].priority) for c in cs]
        return cs[starts.index(max(starts))]

    rng = random.Random(3)
    for trial in range(200):
        cands = []
        for i in range(rng.randint(1, 8)):
            victims = []
            for j in range(rng.randint(1, 3)):
                p = make_pod(f"v{trial}-{i}-{j}", priority=rng.choice([0, 1, 2]))
                p["status"]["startTime"] = f"2026-01-01T00:00:0{rng.randint(0, 3)}Z"
                victims.append(PodInfo(p))
            by_importance(victims)
            cands.append(Candidate(f"n{i}", victims, rng.choice([0, 0, 1])))
        assert pick_one(cands) is staged(cands), trial

"""End-to-end scheduling cycles over the in-memory cluster: bind, fail, retry, preempt."""

import pytest

from nodeagent.scheduler.framework.registry import ConfigError
from nodeagent.scheduler.profile import SchedulerConfig, parse_config, plugin_set
from nodeagent.scheduler.scheduler import Scheduler, num_feasible_nodes_to_find
from nodeagent.testing.clock import FakeClock
from nodeagent.testing.fake_cluster import FakeCluster, make_node, make_pod


def setup(nodes, pods=(), config=None, clock=None, seed=7):
    import random

    cluster = FakeCluster()
    s = Scheduler(parse_config(config) if config else SchedulerConfig(), cluster.api(),
                  clock=clock or FakeClock(),
                  rng=random.Random(seed))
    cluster.subscribe(s)
    for n in nodes:
        cluster.add_node(n)
    for p in pods:
        cluster.add_pod(p)
    return cluster, s


async def retry(s, clock, seconds=11):
    clock.advance(seconds)
    s.queue.flush_backoff_completed()
    await s.drain()


async def test_pending_pods_are_bound_and_reported():
    cluster, s = setup([make_node(f"n{i}", cpu="2") for i in range(3)],
                       [make_pod(f"p{i}", cpu="1") for i in range(6)])
    await s.drain()
    placed = [cluster.node_of(f"p{i}") for i in range(6)]
    assert all(placed) and sorted(placed) == ["n0", "n0", "n1", "n1", "n2", "n2"]
    ev = cluster.events_for("p0", "Scheduled")
    assert ev and ev[0]["message"] == f"Successfully assigned default/p0 to {placed[0]}"
    assert s.stats["scheduled"] == 6 and sum(n.req_cpu for n in s.cache.nodes.values()) == 6000
    assert not any(s.cache.is_assumed(p["metadata"]["uid"]) for p in cluster.pods.values())


async def test_unschedulable_pod_gets_event_and_condition_then_schedules_when_a_node_frees_up():
    clock = FakeClock()
    cluster, s = setup([make_node("n", cpu="1")], [make_pod("first", cpu="1")], clock=clock)
    await s.drain()
    cluster.add_pod(make_pod("second", cpu="1"))
    await s.drain()
    msg = ("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
           "1 No preemption victims found for incoming pod.")
    assert [e["message"] for e in cluster.events_for("second", "FailedScheduling")] == [msg]
    cond = cluster.pod("second")["status"]["conditions"][0]
    assert cond == {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}
    assert s.queue.where(cluster.pod("second")["metadata"]["uid"]) == "unschedulable"
    cluster.remove_pod(cluster.pod("first")["metadata"]["uid"])
    await retry(s, clock)
    assert cluster.node_of("second") == "n"


async def test_unschedulable_pod_schedules_on_a_new_node():
    clock = FakeClock()
    cluster, s = setup([make_node("small", cpu="1")], [make_pod("big", cpu="2")], clock=clock)
    await s.drain()
    assert cluster.node_of("big") is None
    cluster.add_node(make_node("large", cpu="4"))
    await retry(s, clock)
    assert cluster.node_of("big") == "large"


async def test_failed_scheduling_summary_in_kube_scheduler_format():
    taint = [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]
    cluster, s = setup([make_node("a", cpu="1"), make_node("b", taints=taint), make_node("c", taints=taint)],
                       [make_pod("p", cpu="2")])
    await s.drain()
    assert cluster.events_for("p", "FailedScheduling")[0]["message"] == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: infra}. "
        "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling.")


async def test_preemption_evicts_minimal_victims_and_the_preemptor_binds_on_the_nominated_node():
    clock = FakeClock()
    cluster, s = setup([make_node("a", cpu="4"), make_node("b", cpu="4")], [
        make_pod("a1", cpu="1", priority=0, node="a"), make_pod("a2", cpu="1", priority=0, node="a"),
        make_pod("a3", cpu="2", priority=0, node="a"),
        make_pod("b1", cpu="2", priority=5, node="b"), make_pod("b2", cpu="2", priority=5, node="b"),
    ], clock=clock)
    cluster.add_pod(make_pod("vip", cpu="2", priority=1000))
    await s.drain()
    # a: one victim at priority 0 (a3, or a1+a2 would be two); b would need a priority-5 victim
    assert cluster.deleted == ["a3"]
    assert cluster.pod("vip")["status"]["nominatedNodeName"] == "a"
    # a lower-priority pod arriving now must not take the space reserved for vip
    cluster.add_pod(make_pod("sneaky", cpu="2", priority=1))
    await s.drain()
    assert cluster.node_of("sneaky") is None
    await retry(s, clock)
    assert cluster.node_of("vip") == "a"
    # sneaky (priority 1) may itself preempt the priority-0 pods around vip's reservation, never vip's room
    assert sorted(cluster.deleted) == ["a1", "a2", "a3"]
    await retry(s, clock)
    assert cluster.node_of("sneaky") == "a"
    assert s.cache.nodes["a"].req_cpu == 4000


async def test_victims_are_deleted_gracefully():
    cluster, s = setup([make_node("a", cpu="1")], [make_pod("low", cpu="1", priority=0, node="a")])
    cluster.grace_delay = 0.01
    cluster.add_pod(make_pod("hi", cpu="1", priority=10))
    await s.drain()
    assert cluster.deleted == ["low"] and "low" not in [p["metadata"]["name"] for p in cluster.pods.values()]


async def test_bind_failure_forgets_the_pod_and_retries_with_backoff():
    clock = FakeClock()
    cluster, s = setup([make_node("n", cpu="1")], clock=clock)
    cluster.fail_binds.add("p")
    cluster.add_pod(make_pod("p", cpu="1"))
    await s.drain()
    uid = cluster.pod("p")["metadata"]["uid"]
    assert cluster.node_of("p") is None and s.cache.nodes["n"].req_cpu == 0 and not s.cache.is_assumed(uid)
    assert "Binding rejected" in cluster.events_for("p", "FailedScheduling")[0]["message"]
    assert s.queue.where(uid) == "backoff"
    await retry(s, clock)
    assert cluster.node_of("p") == "n"


async def test_required_anti_affinity_spreads_replicas_and_waits_for_room():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    cluster, s = setup([make_node(f"n{i}") for i in range(3)],
                       [make_pod(f"db{i}", labels={"app": "db"}, affinity=anti) for i in range(4)])
    await s.drain()
    placed = [cluster.node_of(f"db{i}") for i in range(4)]
    assert sorted(filter(None, placed)) == ["n0", "n1", "n2"] and placed.count(None) == 1
    waiting = placed.index(None)
    assert "3 node(s) didn't match pod anti-affinity rules" in \
        cluster.events_for(f"db{waiting}", "FailedScheduling")[0]["message"]


async def test_other_schedulers_pods_gated_pods_and_priority_classes():
    cluster, s = setup([make_node("n", cpu="1")])
    cluster.classes.append({"metadata": {"name": "high"}, "value": 1000})
    cluster.classes.append({"metadata": {"name": "default"}, "value": 7, "globalDefault": True})
    cluster.add_pod(make_pod("mine", schedulerName="other-scheduler"))
    cluster.add_pod(make_pod("gated", schedulingGates=[{"name": "wait"}]))
    await s.drain()
    assert cluster.node_of("mine") is None and cluster.node_of("gated") is None
    assert s.stats["attempts"] == 0
    g = cluster.pod("gated")
    cluster.update_pod(dict(g, spec={k: v for k, v in g["spec"].items() if k != "schedulingGates"}))
    await s.drain()
    assert cluster.node_of("gated") == "n"
    assert s._pod_info(make_pod("x", priorityClassName="high")).priority == 1000
    assert s._pod_info(make_pod("y")).priority == 7


async def test_cordon_and_taint_updates_move_parked_pods():
    clock = FakeClock()
    cluster, s = setup([make_node("n", unschedulable=True)], [make_pod("p")], clock=clock)
    await s.drain()
    assert cluster.node_of("p") is None
    cluster.update_node(make_node("n"))
    await retry(s, clock)
    assert cluster.node_of("p") == "n"


def test_percentage_of_nodes_to_score_adaptive_default():
    assert num_feasible_nodes_to_find(50, 0) == 50
    assert num_feasible_nodes_to_find(100, 0) == 100
    assert num_feasible_nodes_to_find(1000, 0) == 420
    assert num_feasible_nodes_to_find(5000, 0) == 500
    assert num_feasible_nodes_to_find(20000, 0) == 1000
    assert num_feasible_nodes_to_find(1000, 5) == 100 and num_feasible_nodes_to_find(1000, 100) == 1000


async def test_scoring_stops_after_enough_feasible_nodes_and_rotates_the_start():
    cluster, s = setup([make_node(f"n{i:03}") for i in range(300)], [make_pod("a"), make_pod("b")])
    s.percentages["default-scheduler"] = 50
    await s.drain()
    assert s.next_start_node_index == 300 % 300 or s.next_start_node_index == 0
    assert cluster.node_of("a") in {f"n{i:03}" for i in range(150)}
    assert cluster.node_of("b") in {f"n{i:03}" for i in range(150, 300)}


def test_profile_merges_defaults_with_user_settings():
    ps = plugin_set(parse_config({"profiles": [{"schedulerName": "s", "plugins": {
        "score": {"disabled": [{"name": "ImageLocality"}],
                  "enabled": [{"name": "NodeResourcesFit", "weight": 5}]},
        "filter": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodeResourcesFit"}]}}}]}).profiles[0])
    assert "ImageLocality" not in ps.points["score"] and ps.weights["NodeResourcesFit"] == 5
    assert ps.points["filter"] == ["NodeResourcesFit"]
    assert ps.weights["TaintToleration"] == 3 and ps.weights["InterPodAffinity"] == 2


def test_profile_errors():
    with pytest.raises(ConfigError):
        unknown = {"filter": {"enabled": [{"name": "Nope"}]}}
        setup([], config={"profiles": [{"schedulerName": "s", "plugins": unknown}]})
    with pytest.raises(ConfigError):
        random_fit = {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Random"}}}
        setup([], config={"profiles": [{"pluginConfig": [random_fit]}]})
    with pytest.raises(ConfigError):
        bogus = {"name": "NodeResourcesFit", "args": {"bogus": 1}}
        setup([], config={"profiles": [{"pluginConfig": [bogus]}]})
    with pytest.raises(ConfigError):
        parse_config({"percentageOfNodesToScore": 150})


def test_default_profile_file_matches_the_built_in_defaults():
    from nodeagent.scheduler.profile import DEFAULT_PROFILE_FILE, Profile, load_config

    cfg = load_config(DEFAULT_PROFILE_FILE)
    assert plugin_set(cfg.profiles[0]) == plugin_set(Profile())
    cluster, s = setup([make_node("n")])
    s2 = Scheduler(cfg, cluster.api())
    assert list(s2.frameworks["default-scheduler"].plugins) == list(s.frameworks["default-scheduler"].plugins)


async def test_nominated_node_from_the_api_is_honoured_by_lower_priority_pods():
    clock = FakeClock()
    cluster, s = setup([make_node("n", cpu="2")], clock=clock)
    vip = make_pod("vip", cpu="2", priority=100, schedulingGates=[{"name": "hold"}])
    vip["status"]["nominatedNodeName"] = "n"
    cluster.add_pod(vip)
    cluster.add_pod(make_pod("low", cpu="1", priority=1))
    await s.drain()
    assert cluster.node_of("low") is None
    event = cluster.events_for("low", "FailedScheduling")[0]
    assert "0/1 nodes are available: 1 Insufficient cpu." in event["message"]


async def test_prefilter_result_narrows_nodes_and_names_the_plugin():
    by_name = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}}
    cluster, s = setup([make_node("a"), make_node("b", cpu="1")], [make_pod("p", cpu="2", affinity=by_name)])
    await s.drain()
    msg = cluster.events_for("p", "FailedScheduling")[0]["message"]
    assert msg.startswith("0/2 nodes are available: 1 Insufficient cpu, "
                          "1 node(s) didn't satisfy plugin(s) [NodeAffinity].")
    cluster2, s2 = setup([make_node("a"), make_node("b")], [make_pod("p", affinity=by_name)])
    await s2.drain()
    assert cluster2.node_of("p") == "b"


async def test_no_nodes_then_a_node_arrives():
    clock = FakeClock()
    cluster, s = setup([], [make_pod("p")], clock=clock)
    await s.drain()
    assert [e["message"] for e in cluster.events_for("p", "FailedScheduling")] == [
        "no nodes available to schedule pods"]
    assert s.queue.where(cluster.pod("p")["metadata"]["uid"]) == "unschedulable"
    cluster.add_node(make_node("n"))
    await retry(s, clock)
    assert cluster.node_of("p") == "n"


async def test_prefilter_rejection_still_reports_preemption():
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    cluster, s = setup([make_node("a"), make_node("b")], [make_pod("p", affinity=aff)])
    await s.drain()
    assert cluster.events_for("p", "FailedScheduling")[0]["message"] == (
        "0/2 nodes are available: 2 node(s) didn't match pod affinity rules. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")


async def test_run_with_an_event_source_waits_for_sync_then_schedules():
    import asyncio
    import random

    cluster = FakeCluster()
    cluster.nodes["n"] = make_node("n")  # present before the scheduler starts: delivered by the initial list
    pending = make_pod("early")
    cluster.pods[pending["metadata"]["uid"]] = pending
    cluster.by_name[("default", "early")] = pending["metadata"]["uid"]
    s = Scheduler(SchedulerConfig(), cluster.api(), rng=random.Random(1))
    ready = asyncio.Event()
    task = asyncio.create_task(s.run(ready, source=cluster))
    await asyncio.wait_for(ready.wait(), 5)
    cluster.add_pod(make_pod("late"))
    await asyncio.wait_for(s.wait_scheduled(2), 5)
    assert cluster.node_of("early") == "n" and cluster.node_of("late") == "n"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not s._tasks


def test_ties_are_broken_at_random_among_the_best_only():
    from nodeagent.scheduler.framework import NodeInfo

    cluster, s = setup([])
    nodes = [NodeInfo(make_node(n)) for n in ("a", "b", "c", "d")]
    picks = {s.select_host(nodes, [90, 100, 100, 40]) for _ in range(200)}
    assert picks == {"b", "c"}
    assert s.select_host(nodes, [1, 2, 3, 4]) == "d"

from fractions import Fraction
from pathlib import Path

import pytest

from nodeagent.kubelet.eviction import (
    EvictionManager,
    PodUsage,
    ThresholdError,
    evicted_status,
    hard_eviction_reservation,
    observations_from,
    parse_duration,
    parse_thresholds,
    rank_pods,
    signals,
)
from nodeagent.testing.clock import FakeClock
from tests.unit.kubelet.podspecs import container, pod

Mi, Gi = 2**20, 2**30


def test_parse_hard_soft_grace_and_reclaim():
    ts = parse_thresholds("memory.available<500Mi,nodefs.available<10%", soft="memory.available<1Gi",
                          soft_grace_period="memory.available=1m30s",
                          minimum_reclaim="memory.available=100Mi,nodefs.available=5%")
    hard_mem, hard_fs, soft_mem = ts
    assert hard_mem.signal == "memory.available"
    assert hard_mem.value.quantity == 500 * Mi and hard_mem.is_hard()
    assert hard_mem.min_reclaim and hard_mem.min_reclaim.quantity == 100 * Mi
    assert hard_fs.value.percentage == pytest.approx(0.10)
    assert hard_fs.min_reclaim and hard_fs.min_reclaim.percentage == pytest.approx(0.05)
    assert soft_mem.grace_period == 90 and not soft_mem.is_hard()
    assert hard_fs.value.resolve(1000) == 100


def test_default_hard_thresholds():
    signals_ = [t.signal for t in parse_thresholds()]
    assert signals_ == ["memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available"]


@pytest.mark.parametrize("hard,soft,grace,msg", [
    ("memory.avail<1Gi", None, None, "unsupported eviction signal memory.avail"),
    ("memory.available<-1Gi", None, None, "must be positive"),
    ("memory.available<0", None, None, "must be positive"),
    ("nodefs.available<120%", None, None, "must be <= 100%"),
    ("memory.available=1Gi", None, None, "malformed pair"),
    (None, "memory.available<1Gi", None, "grace period must be specified for the soft eviction threshold"),
    (None, "memory.available<1Gi", "memory.available=soon", "invalid duration"),
])
def test_parse_errors(hard, soft, grace, msg):
    with pytest.raises(ThresholdError, match=msg):
        parse_thresholds(hard, soft=soft, soft_grace_period=grace)


def test_zero_and_hundred_percent_are_ignored():
    assert parse_thresholds("nodefs.available<0%,imagefs.available<100%") == []


def test_parse_duration():
    assert parse_duration("1m30s") == 90 and parse_duration("2h") == 7200 and parse_duration("500ms") == 0.5
    assert parse_duration("0") == 0


def test_hard_eviction_reservation():
    ts = parse_thresholds("memory.available<100Mi,nodefs.available<10%,pid.available<100",
                          soft="memory.available<1Gi", soft_grace_period="memory.available=1m")
    assert hard_eviction_reservation(ts, {"memory": "4Gi", "ephemeral-storage": "100Gi"}) == {
        "memory": 100 * Mi, "ephemeral-storage": Fraction(10 * Gi)}


# -- evaluation ------------------------------------------------------------------------------------


def mem_obs(avail, cap=8 * Gi):
    return observations_from({"memory.available": (avail, cap)})


def test_hard_threshold_fires_immediately_and_min_reclaim_keeps_it():
    clock = FakeClock()
    thresholds = parse_thresholds("memory.available<500Mi", minimum_reclaim="memory.available=200Mi")
    m = EvictionManager(thresholds, clock)
    assert m.evaluate(mem_obs(600 * Mi)) == []
    assert [t.signal for t in m.evaluate(mem_obs(400 * Mi))] == ["memory.available"]
    assert m.conditions()["MemoryPressure"]
    # above the threshold but not above threshold + min reclaim: still acting
    assert len(m.evaluate(mem_obs(600 * Mi))) == 1
    assert m.evaluate(mem_obs(701 * Mi)) == []


def test_soft_threshold_waits_for_grace_period():
    clock = FakeClock()
    m = EvictionManager(parse_thresholds(None, soft="memory.available<1Gi",
                                         soft_grace_period="memory.available=30s"),
                        clock)
    assert m.evaluate(mem_obs(512 * Mi)) == []
    assert m.conditions()["MemoryPressure"]  # the condition is immediate, the eviction is not
    clock.advance(29)
    assert m.evaluate(mem_obs(512 * Mi)) == []
    clock.advance(1)
    assert len(m.evaluate(mem_obs(512 * Mi))) == 1
    # recovering resets the grace clock
    m.evaluate(mem_obs(2 * Gi))
    clock.advance(1)
    assert m.evaluate(mem_obs(512 * Mi)) == []


def test_pressure_transition_period():
    clock = FakeClock()
    m = EvictionManager(parse_thresholds("memory.available<1Gi"), clock, pressure_transition_period=300)
    m.evaluate(mem_obs(512 * Mi))
    clock.advance(10)
    m.evaluate(mem_obs(4 * Gi))
    assert m.conditions()["MemoryPressure"]
    assert m.taints() == [{"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}]
    clock.advance(289)
    m.evaluate(mem_obs(4 * Gi))
    assert m.conditions()["MemoryPressure"]
    clock.advance(1)
    m.evaluate(mem_obs(4 * Gi))
    assert not m.conditions()["MemoryPressure"] and m.taints() == []


def test_disk_and_pid_conditions():
    m = EvictionManager(parse_thresholds("nodefs.inodesFree<5%,pid.available<1000"), FakeClock())
    m.evaluate(observations_from({"nodefs.inodesFree": (10, 1000), "pid.available": (500, 32768)}))
    assert m.conditions() == {"MemoryPressure": False, "DiskPressure": True, "PIDPressure": True}
    conds = m.node_conditions_status()
    assert [(c["type"], c["status"], c["reason"]) for c in conds] == [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        ("DiskPressure", "True", "KubeletHasDiskPressure"),
        ("PIDPressure", "True", "KubeletHasInsufficientPID")]


# -- ranking and victims -----------------------------------------------------------------------------


def mk(name, requests=None, limits=None, priority=None):
    p = pod(container(name, requests=requests, limits=limits), name=name, uid=name)
    if priority is not None:
        p["spec"]["priority"] = priority
    return p


def test_memory_ranking_exceeding_requests_then_priority_then_usage():
    be_small = mk("be-small")
    be_big = mk("be-big")
    burst_within = mk("burst-within", requests={"memory": "1Gi"})
    burst_over_high_prio = mk("burst-over-hp", requests={"memory": "100Mi"}, priority=1000)
    guaranteed = mk("guaranteed", limits={"memory": "2Gi", "cpu": "1"})
    usage = {"be-small": 10 * Mi, "be-big": 300 * Mi, "burst-within": 900 * Mi, "burst-over-hp": 500 * Mi,
             "guaranteed": 1900 * Mi}
    stats = {n: PodUsage(memory=u) for n, u in usage.items()}
    ranked = rank_pods([guaranteed, burst_within, be_small, burst_over_high_prio, be_big], "memory.available",
                       lambda p: stats.get(p["metadata"]["name"]))
    assert [p["metadata"]["name"] for p in ranked] == ["be-big", "be-small", "burst-over-hp",
                                                        # both under their requests: -124Mi beats -148Mi
                                                        "burst-within", "guaranteed"]


def test_pid_ranking():
    a, b, c = mk("a"), mk("b"), mk("c", priority=-5)
    stats = {"a": PodUsage(processes=5), "b": PodUsage(processes=50), "c": PodUsage(processes=1)}
    ranked = rank_pods([a, b, c], "pid.available", lambda p: stats[p["metadata"]["name"]])
    assert [p["metadata"]["name"] for p in ranked] == ["c", "b", "a"]


def test_synchronize_picks_besteffort_first_with_message():
    clock = FakeClock()
    m = EvictionManager(parse_thresholds("memory.available<500Mi"), clock)
    be = mk("hog")
    g = mk("db", limits={"memory": "1Gi", "cpu": "1"})
    stats = {"hog": PodUsage(memory=300 * Mi, containers={"hog": {"memory": 300 * Mi}}),
             "db": PodUsage(memory=900 * Mi, containers={"db": {"memory": 900 * Mi}})}
    ev = m.synchronize(mem_obs(400 * Mi), [g, be], lambda p: stats[p["metadata"]["name"]])
    assert ev is not None
    assert ev.pod is be
    assert ev.grace_period == 1
    assert ev.message == ("The node was low on resource: memory. "
                          "Threshold quantity: 500Mi, available: 400Mi. "
                          "Container hog was using 300Mi, request is 0, has larger consumption of memory. ")
    assert ev.annotations == {"offending_containers": "hog", "offending_containers_usage": "300Mi",
                              "starved_resource": "memory"}
    assert m.synchronize(mem_obs(4 * Gi), [g, be], lambda p: stats[p["metadata"]["name"]]) is None


def test_critical_pods_are_skipped_and_soft_grace_is_capped():
    clock = FakeClock()
    m = EvictionManager(parse_thresholds(None, soft="memory.available<1Gi",
                                         soft_grace_period="memory.available=0s"),
                        clock, max_pod_grace_period=10)
    static = mk("static")
    static["metadata"]["annotations"] = {"kubernetes.io/config.source": "file"}
    normal = mk("normal")
    normal["spec"]["terminationGracePeriodSeconds"] = 60
    stats = {"static": PodUsage(memory=900 * Mi), "normal": PodUsage(memory=10 * Mi)}
    ev = m.synchronize(mem_obs(512 * Mi), [static, normal], lambda p: stats[p["metadata"]["name"]])
    assert ev is not None and ev.pod is normal and ev.grace_period == 10


def test_evicted_status_and_admission():
    p = mk("x")
    st = evicted_status(p, "The node was low on resource: memory. ", 1_700_000_000)
    assert st["phase"] == "Failed" and st["reason"] == "Evicted"
    assert st["conditions"][-1]["type"] == "DisruptionTarget"
    m = EvictionManager(parse_thresholds("memory.available<1Gi"), FakeClock())
    m.evaluate(mem_obs(512 * Mi))
    assert m.admit(mk("be")) == "The node had condition: [MemoryPressure]. "
    assert m.admit(mk("b", requests={"memory": "1Mi"})) is None
    tolerating = mk("t")
    tolerating["spec"]["tolerations"] = [{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists",
                                          "effect": "NoSchedule"}]
    assert m.admit(tolerating) is None


# -- observation from files --------------------------------------------------------------------------


def test_observe_from_fixture_files(tmp_path: Path):
    proc = tmp_path / "proc"
    (proc / "sys/kernel").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal:        8000000 kB\nMemFree:  100 kB\n")
    (proc / "sys/kernel/pid_max").write_text("4194304\n")
    (proc / "sys/kernel/threads-max").write_text("60000\n")
    (proc / "loadavg").write_text("0.10 0.20 0.30 2/345 6789\n")
    cg = tmp_path / "cg"
    (cg / "memory").mkdir(parents=True)
    (cg / "memory/memory.usage_in_bytes").write_text(str(3_000_000_000))
    (cg / "memory/memory.stat").write_text("cache 5\ntotal_inactive_file 1000000000\n")
    mem = signals.observe_memory(proc, cg / "memory")
    assert mem.capacity == 8_192_000_000 and mem.available == 8_192_000_000 - 2_000_000_000
    pids = signals.observe_pids(proc)
    assert (pids.available, pids.capacity) == (60000 - 345, 60000)
    # cgroup v2 layout
    cg2 = tmp_path / "cg2"
    cg2.mkdir()
    (cg2 / "memory.stat").write_text("anon 1\ninactive_file 92000000\n")
    mem2 = signals.observe_memory(proc, cg2)
    assert mem2.available == 8_192_000_000 - (8_192_000_000 - 102_400 - 92_000_000)
    kp = tmp_path / "kubepods"
    kp.mkdir()
    (kp / "memory.current").write_text("500")
    (kp / "memory.stat").write_text("inactive_file 100\n")
    assert signals.observe_allocatable_memory(kp, 1000).available == 600


def test_observe_real_host(tmp_path: Path):
    obs = signals.observe(tmp_path)
    for name in ("memory.available", "nodefs.available", "nodefs.inodesFree", "pid.available"):
        assert 0 < obs[name].available <= obs[name].capacity, name


def test_local_storage_violations():
    from nodeagent.kubelet.eviction import local_storage_violation

    p = pod(container("app", limits={"ephemeral-storage": "100Mi"}),
            container("side", limits={"ephemeral-storage": "50Mi"}))
    p["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {"sizeLimit": "10Mi"}}]
    within = PodUsage(ephemeral_storage=20 * Mi, volumes={"scratch": 5 * Mi})
    assert local_storage_violation(p, within) is None
    assert local_storage_violation(p, PodUsage(volumes={"scratch": 11 * Mi})) == \
        'Usage of EmptyDir volume "scratch" exceeds the limit "10Mi". '
    assert local_storage_violation(p, PodUsage(ephemeral_storage=151 * Mi)) == \
        "Pod ephemeral local storage usage exceeds the total limit of containers 150Mi. "
    assert local_storage_violation(p, PodUsage(ephemeral_storage=60 * Mi,
                                               containers={"side": {"ephemeral-storage": 60 * Mi}})) == \
        'Container side exceeded its local ephemeral storage limit "50Mi". '
    m = EvictionManager([], FakeClock())
    evs = m.local_storage_evictions([p], lambda _: PodUsage(volumes={"scratch": 11 * Mi}))
    assert len(evs) == 1 and evs[0].grace_period == 0

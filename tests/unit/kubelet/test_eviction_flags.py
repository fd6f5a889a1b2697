"""The kubelet's eviction and reservation flags on `up`/`agent`: parsed as kubelet's ParseThresholdConfig
and parseResourceList take them (rows ported from pkg/kubelet/eviction/helpers_test.go
TestParseThresholdConfig), refused with kubelet's message, and wired into the eviction manager and the
Node's allocatable."""

from __future__ import annotations

from fractions import Fraction

import pytest

from nodeagent.kubelet.eviction import EvictionManager, observations_from
from nodeagent.kubelet.eviction.thresholds import ThresholdError, parse_thresholds
from nodeagent.kubelet.node import NodeAgent
from nodeagent.testing.clock import FakeClock
from tests.unit.test_configs import _agent, _up

Mi, Gi = 2**20, 2**30


def _summary(ts):
    return [(t.signal, str(t.value), t.grace_period, str(t.min_reclaim) if t.min_reclaim else None)
            for t in ts]


@pytest.mark.parametrize("name,hard,soft,grace,reclaim,want", [
    ("no values", "", "", "", "", []),
    ("all flag values", "memory.available<150Mi", "memory.available<300Mi", "memory.available=30s",
     "memory.available=0",
     [("memory.available", str(150 * Mi), 0, "0"), ("memory.available", str(300 * Mi), 30, "0")]),
    ("all flag values in percentages", "memory.available<10%", "memory.available<30%",
     "memory.available=30s", "memory.available=5%",
     [("memory.available", "10%", 0, "5%"), ("memory.available", "30%", 30, "5%")]),
    ("disk flag values", "imagefs.available<150Mi,nodefs.available<100Mi",
     "imagefs.available<300Mi,nodefs.available<200Mi", "imagefs.available=30s,nodefs.available=30s",
     "imagefs.available=2Gi,nodefs.available=1Gi",
     [("imagefs.available", str(150 * Mi), 0, str(2 * Gi)), ("nodefs.available", str(100 * Mi), 0, str(Gi)),
      ("imagefs.available", str(300 * Mi), 30, str(2 * Gi)),
      ("nodefs.available", str(200 * Mi), 30, str(Gi))]),
    ("disk flag values in percentages", "imagefs.available<15%,nodefs.available<10.5%",
     "imagefs.available<30%,nodefs.available<20.5%", "imagefs.available=30s,nodefs.available=30s",
     "imagefs.available=10%,nodefs.available=5%",
     [("imagefs.available", "15%", 0, "10%"), ("nodefs.available", "10.5%", 0, "5%"),
      ("imagefs.available", "30%", 30, "10%"), ("nodefs.available", "20.5%", 30, "5%")]),
    ("inode flag values", "imagefs.inodesFree<150Mi,nodefs.inodesFree<100Mi",
     "imagefs.inodesFree<300Mi,nodefs.inodesFree<200Mi", "imagefs.inodesFree=30s,nodefs.inodesFree=30s",
     "imagefs.inodesFree=2Gi,nodefs.inodesFree=1Gi",
     [("imagefs.inodesFree", str(150 * Mi), 0, str(2 * Gi)), ("nodefs.inodesFree", str(100 * Mi), 0, str(Gi)),
      ("imagefs.inodesFree", str(300 * Mi), 30, str(2 * Gi)),
      ("nodefs.inodesFree", str(200 * Mi), 30, str(Gi))]),
])
def test_parse_threshold_config(name, hard, soft, grace, reclaim, want):
    assert _summary(parse_thresholds(hard, soft, grace, reclaim)) == want


@pytest.mark.parametrize("name,hard,soft,grace,reclaim,msg", [
    ("invalid-signal", "mem.available<150Mi", "", "", "", "unsupported eviction signal mem.available"),
    ("hard-signal-negative", "memory.available<-150Mi", "", "", "", "must be positive"),
    ("hard-signal-negative-percentage", "memory.available<-15%", "", "", "", "must be >= 0%"),
    ("soft-signal-negative", "", "memory.available<-150Mi", "", "", "must be positive"),
    ("valid-and-invalid-signal", "memory.available<150Mi,invalid.foo<150Mi", "", "", "",
     "unsupported eviction signal invalid.foo"),
    ("soft-no-grace-period", "", "memory.available<150Mi", "", "",
     "grace period must be specified for the soft eviction threshold memory.available"),
    ("soft-neg-grace-period", "", "memory.available<150Mi", "memory.available=-30s", "",
     "invalid"),
    ("neg-reclaim", "", "", "", "memory.available=-300Mi", "negative minimum reclaim"),
])
def test_parse_threshold_config_errors(name, hard, soft, grace, reclaim, msg):
    with pytest.raises(ThresholdError, match=msg):
        parse_thresholds(hard, soft, grace, reclaim)


@pytest.mark.parametrize("argv,says", [
    (["--eviction-soft", "memory.available<1Gi"],
     "grace period must be specified for the soft eviction threshold memory.available"),
    (["--eviction-soft", "memory.available<1Gi", "--eviction-soft-grace-period", "memory.available=later"],
     "invalid duration"),
    (["--eviction-minimum-reclaim", "memory.available=-1Mi"], "negative minimum reclaim"),
    (["--eviction-pressure-transition-period", "5 minutes"],
     '"--eviction-pressure-transition-period" flag'),
    (["--system-reserved", "gpu=1"], "cannot reserve 'gpu' resource"),
    (["--kube-reserved", "memory=-1Gi"], "resource quantity for 'memory' cannot be negative"),
    (["--kube-reserved", "memory=lots"], "failed to parse quantity 'lots' for 'memory' resource"),
    (["--system-reserved", "memory"], 'invalid argument "memory" for "--system-reserved" flag'),
])
def test_up_and_agent_refuse_malformed_eviction_flags(tmp_path, argv, says):
    with pytest.raises(SystemExit, match=says):
        _up(tmp_path, *argv)
    with pytest.raises(SystemExit, match=says):
        _agent(tmp_path, *argv)


def _kubelet_cfg(tmp_path, *argv):
    return _up(tmp_path, *argv).kubelet


def test_flags_reach_the_kubelet_config(tmp_path):
    k = _kubelet_cfg(tmp_path, "--eviction-hard", "memory.available<100Mi",
                     "--eviction-soft", "memory.available<1Gi",
                     "--eviction-soft-grace-period", "memory.available=1m30s",
                     "--eviction-minimum-reclaim", "memory.available=50Mi",
                     "--eviction-max-pod-grace-period", "20", "--eviction-pressure-transition-period", "30s",
                     "--system-reserved", "cpu=200m,memory=100Mi", "--kube-reserved", "pid=100")
    assert _summary(k.thresholds()) == [("memory.available", str(100 * Mi), 0, str(50 * Mi)),
                                        ("memory.available", str(Gi), 90, str(50 * Mi))]
    assert k.eviction_max_pod_grace_period == 20 and k.eviction_pressure_transition_period == 30
    assert k.reserved() == ({"cpu": Fraction(1, 5), "memory": 100 * Mi}, {"pid": 100})


def test_defaults_are_kubelets(tmp_path):
    k = _kubelet_cfg(tmp_path)
    assert k.eviction_pressure_transition_period == 300 and k.eviction_max_pod_grace_period == 0
    assert k.reserved() == ({}, {})
    assert [t.signal for t in k.thresholds()] == ["memory.available", "nodefs.available",
                                                  "nodefs.inodesFree", "imagefs.available"]


def _manager(k, clock):
    """Built as the Kubelet builds it from its config."""
    return EvictionManager(k.thresholds(), clock,
                           pressure_transition_period=k.eviction_pressure_transition_period,
                           max_pod_grace_period=k.eviction_max_pod_grace_period)


def test_soft_threshold_from_flags_evicts_only_after_its_grace_period(tmp_path):
    k = _kubelet_cfg(tmp_path, "--eviction-hard", "", "--eviction-soft", "memory.available<1Gi",
                     "--eviction-soft-grace-period", "memory.available=1m",
                     "--eviction-max-pod-grace-period", "5",
                     "--eviction-pressure-transition-period", "10s")
    clock = FakeClock()
    m = _manager(k, clock)
    low = observations_from({"memory.available": (512 * Mi, 8 * Gi)})
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"},
           "spec": {"terminationGracePeriodSeconds": 30, "containers": [{"name": "c"}]}, "status": {}}
    assert m.synchronize(low, [pod], lambda p: None) is None
    assert m.conditions()["MemoryPressure"]
    clock.advance(59)
    assert m.synchronize(low, [pod], lambda p: None) is None
    clock.advance(1)
    ev = m.synchronize(low, [pod], lambda p: None)
    assert ev is not None and ev.grace_period == 5  # capped by --eviction-max-pod-grace-period
    # the pressure condition outlasts the signal by the transition period
    ok = observations_from({"memory.available": (4 * Gi, 8 * Gi)})
    m.evaluate(ok)
    clock.advance(9)
    m.evaluate(ok)
    assert m.conditions()["MemoryPressure"]
    clock.advance(1)
    m.evaluate(ok)
    assert not m.conditions()["MemoryPressure"]


def test_allocatable_is_capacity_less_reserved_and_hard_eviction(tmp_path):
    k = _kubelet_cfg(tmp_path, "--eviction-hard", "memory.available<100Mi",
                     "--system-reserved", "memory=100Mi,cpu=100m", "--kube-reserved", "memory=50Mi")
    system, kube = k.reserved()
    node = NodeAgent(None, None, "n", str(tmp_path), lambda: (True, ""), FakeClock(),  # type: ignore[arg-type]
                     eviction=_manager(k, FakeClock()), addresses=["10.0.0.1"],
                     system_reserved=system, kube_reserved=kube)
    node.capacity = {"cpu": "2", "memory": "4Gi", "pods": "110", "ephemeral-storage": "10Gi"}
    alloc = node.allocatable()
    assert alloc["memory"] == f"{4 * 1024 - 250}Mi"
    assert alloc["cpu"] == "1900m"
    assert alloc["ephemeral-storage"] == "10Gi"  # this --eviction-hard names no nodefs threshold

"""The CPU manager's static policy, its checkpoint (kubelet's format and checksum) and its cpusets."""

from __future__ import annotations

import json

import pytest

from nodeagent.kubelet.cpumanager import state as st
from nodeagent.kubelet.cpumanager.cpuset import CPUSetError, Topology, format_set, parse, take_by_topology
from nodeagent.kubelet.cpumanager.manager import (
    AllocationError,
    CPUManager,
    CPUManagerError,
    guaranteed_cpus,
)
from tests.unit.kubelet.podspecs import container, pod


def guaranteed(cpu: str, name: str = "c", uid: str = "u1") -> dict:
    c = container(name, requests={"cpu": cpu, "memory": "64Mi"}, limits={"cpu": cpu, "memory": "64Mi"})
    return pod(c, uid=uid)


@pytest.mark.parametrize("text,cpus", [("", set()), ("0", {0}), ("0-2,4", {0, 1, 2, 4}), ("3,1", {1, 3})])
def test_cpuset_parse_and_format(text, cpus):
    assert parse(text) == cpus
    assert parse(format_set(cpus)) == cpus
    assert format_set({0, 1, 2, 4, 6, 7}) == "0-2,4,6-7"


@pytest.mark.parametrize("bad", ["a", "2-1", "0,,1", "-1"])
def test_cpuset_refuses_bad_lists(bad):
    with pytest.raises(CPUSetError):
        parse(bad)


@pytest.mark.parametrize("doc,checksum", [
    # kubelet's own state_checkpoint_test.go vectors
    (st.Checkpoint("none", "4-6", {}), 354655845),
    (st.Checkpoint("none", "1-3", {"pod": {"container1": "4-6", "container2": "1-3"}}), 3610638499),
])
def test_checkpoint_checksum_is_kubelets(doc, checksum):
    assert doc.checksum() == checksum
    assert json.loads(doc.to_json())["checksum"] == checksum
    assert st.Checkpoint.from_json(doc.to_json()) == doc


def test_checkpoint_with_a_wrong_checksum_is_corrupted():
    text = st.Checkpoint("static", "0-1", {}).to_json().replace('"checksum":', '"checksum":1')
    with pytest.raises(st.StateError, match="corrupted"):
        st.Checkpoint.from_json(text)
    # 0 (the old file backend's) is accepted
    old = st.Checkpoint.from_json('{"policyName":"none","defaultCpuSet":"","checksum":0}')
    assert old.policy_name == "none"


def test_guaranteed_cpus_only_for_whole_cpus_of_guaranteed_pods():
    assert guaranteed_cpus(guaranteed("2"), guaranteed("2")["spec"]["containers"][0]) == 2
    assert guaranteed_cpus(guaranteed("1500m"), guaranteed("1500m")["spec"]["containers"][0]) == 0
    burst = pod(container(requests={"cpu": "1"}))
    assert guaranteed_cpus(burst, burst["spec"]["containers"][0]) == 0


def test_take_by_topology_prefers_whole_cores():
    ht = Topology.flat(8, threads_per_core=2)  # cores {0,1} {2,3} {4,5} {6,7}
    assert take_by_topology(ht, frozenset(range(1, 8)), 2) == {2, 3}
    assert take_by_topology(ht, frozenset(range(1, 8)), 1) == {1}  # the half-taken core first
    with pytest.raises(CPUSetError, match="requested=9, available=7"):
        take_by_topology(ht, frozenset(range(1, 8)), 9)


def test_static_policy_shrinks_the_shared_pool_and_recovers(tmp_path):
    m = CPUManager("static", tmp_path, Topology.flat(2), reserved={0})
    m.start()
    assert m.checkpoint().default_cpu_set == "0-1"
    g, be = guaranteed("1"), pod(container("be"), uid="u2")
    assert m.allocate(g) and not m.allocate(g)  # idempotent
    assert m.cpuset(g, g["spec"]["containers"][0]) == "1"
    assert m.cpuset(be, be["spec"]["containers"][0]) == "0"
    doc = json.loads((tmp_path / "cpu_manager_state").read_text())
    assert doc["policyName"] == "static" and doc["defaultCpuSet"] == "0"
    assert doc["entries"] == {"u1": {"c": "1"}}
    again = CPUManager("static", tmp_path, Topology.flat(2), reserved={0})
    again.start()
    assert again.cpuset(g, g["spec"]["containers"][0]) == "1"
    with pytest.raises(AllocationError, match="requested=1, available=0"):
        again.allocate(guaranteed("1", uid="u3"))
    assert again.remove_stale(["u2"])
    assert again.checkpoint().default_cpu_set == "0-1" and again.checkpoint().entries == {}


def test_init_container_runs_on_its_pods_exclusive_cpus(tmp_path):
    m = CPUManager("static", tmp_path, Topology.flat(4), reserved={0})
    m.start()
    res = {"requests": {"cpu": "1", "memory": "8Mi"}, "limits": {"cpu": "1", "memory": "8Mi"}}
    p = pod(container("app", **{"resources": {"requests": {"cpu": "2", "memory": "8Mi"},
                                               "limits": {"cpu": "2", "memory": "8Mi"}}}),
            init=[container("init", resources=res)])
    m.allocate(p)
    assert m.cpuset(p, p["spec"]["containers"][0]) == "1-2"
    assert m.cpuset(p, p["spec"]["initContainers"][0]) == "1"
    assert m.checkpoint().default_cpu_set == "0,3"


def test_policy_change_with_existing_state_is_refused(tmp_path):
    CPUManager("none", tmp_path, Topology.flat(2)).start()
    with pytest.raises(CPUManagerError) as ei:
        CPUManager("static", tmp_path, Topology.flat(2), reserved={0}).start()
    assert 'configured policy "static" differs from state checkpoint policy "none"' in str(ei.value)
    assert "delete the CPU manager checkpoint file" in str(ei.value)


def test_static_needs_reserved_cpus(tmp_path):
    with pytest.raises(CPUManagerError, match="greater than zero"):
        CPUManager("static", tmp_path, Topology.flat(2))
    with pytest.raises(CPUManagerError, match="not online"):
        CPUManager("static", tmp_path, Topology.flat(2), reserved={5})


def test_state_from_another_machine_is_refused(tmp_path):
    st.store(tmp_path / "cpu_manager_state", st.Checkpoint("static", "0-3", {}))
    with pytest.raises(CPUManagerError, match="doesn't match with CPUs in state"):
        CPUManager("static", tmp_path, Topology.flat(2), reserved={0}).start()


def test_none_policy_sets_no_cpuset(tmp_path):
    m = CPUManager("none", tmp_path, Topology.flat(2))
    m.start()
    g = guaranteed("1")
    assert not m.allocate(g) and m.cpuset(g, g["spec"]["containers"][0]) == ""
    assert json.loads((tmp_path / "cpu_manager_state").read_text())["policyName"] == "none"


# -- flags on up/agent ------------------------------------------------------------------------------


@pytest.mark.parametrize("argv,says", [
    (["--reserved-cpus", "0-x"], "--reserved-cpus"),
    (["--memory-manager-policy", "Static"], "no memory manager"),
    (["--topology-manager-policy", "single-numa-node"], "no topology manager"),
    (["--cpu-manager-reconcile-period", "often"], '"--cpu-manager-reconcile-period" flag'),
    (["--max-pods", "0"], "--max-pods 0"),
])
def test_up_and_agent_refuse_bad_cpu_flags(tmp_path, argv, says):
    from tests.unit.test_configs import _agent, _up

    with pytest.raises(SystemExit, match=says):
        _up(tmp_path, *argv)
    with pytest.raises(SystemExit, match=says):
        _agent(tmp_path, *argv)


def test_cpu_flags_reach_the_kubelet_config(tmp_path):
    from tests.unit.test_configs import _up

    k = _up(tmp_path, "--cpu-manager-policy", "static", "--reserved-cpus", "0,1",
            "--system-reserved", "cpu=500m,memory=1Gi", "--kube-reserved", "cpu=1",
            "--max-pods", "50", "--pods-per-core", "10", "--cpu-manager-reconcile-period", "2s").kubelet
    assert k.cpu_manager_policy == "static" and k.reserved_cpu_set() == {0, 1}
    assert k.cpu_manager_reconcile_period == 2.0
    system, kube = k.reserved()
    assert system["cpu"] == 2 and "cpu" not in kube and system["memory"] == 2**30  # --reserved-cpus wins
    assert k.pod_capacity(2) == 20 and k.pod_capacity(8) == 50


# -- the cgroup v2 path (the lab's Debian 12 guests) --------------------------------------------------


def test_v2_container_and_kubepods_files(tmp_path):
    """What the runtime's v2 driver writes for the CPU manager's cpusets and node allocatable's kubepods:
    cpuset.cpus on the container, cpu.weight and memory.max on kubepods (a unified tree laid out in tmp)."""
    from kernel.cgroups.base import Resources
    from kernel.cgroups.v2 import V2Cgroups
    from nodeagent.kubelet import node_allocatable

    for d in ("inst/kubepods/podu1/c1", "inst/kubepods/besteffort/podu2/c2"):
        (tmp_path / d).mkdir(parents=True)
    drv = V2Cgroups(str(tmp_path))
    m = CPUManager("static", tmp_path / "state", Topology.flat(2), reserved={0})
    m.start()
    g, be = guaranteed("1", name="c1", uid="u1"), pod(container("c2"), uid="u2")
    m.allocate(g)
    drv.apply("/inst/kubepods/podu1/c1", Resources(cpuset_cpus=m.cpuset(g, g["spec"]["containers"][0])))
    drv.apply("/inst/kubepods/besteffort/podu2/c2",
              Resources(cpuset_cpus=m.cpuset(be, be["spec"]["containers"][0])))
    assert (tmp_path / "inst/kubepods/podu1/c1/cpuset.cpus").read_text().strip() == "1"
    assert (tmp_path / "inst/kubepods/besteffort/podu2/c2/cpuset.cpus").read_text().strip() == "0"
    node_allocatable.enforce(drv, ("inst",), {"cpu": "2", "memory": "4Gi"}, ("pods",), {"memory": "1Gi"}, {})
    assert (tmp_path / "inst/kubepods/memory.max").read_text().strip() == str(3 << 30)
    assert (tmp_path / "inst/kubepods/cpu.weight").read_text().strip() == "79"  # 2048 shares, runc's mapping

from fractions import Fraction

import pytest

from nodeagent.kubelet import resources as r
from tests.unit.kubelet.podspecs import container, pod

G = {"cpu": "500m", "memory": "128Mi"}
GiB = 2**30


@pytest.mark.parametrize("milli,shares", [(0, 2), (1, 2), (2, 2), (100, 102), (1000, 1024), (250, 256),
                                          (10**6, 262144)])
def test_milli_cpu_to_shares(milli, shares):
    assert r.milli_cpu_to_shares(milli) == shares


@pytest.mark.parametrize("milli,quota",
                         [(0, 0), (1, 1000), (5, 1000), (10, 1000), (100, 10000), (1500, 150000)])
def test_milli_cpu_to_quota(milli, quota):
    assert r.milli_cpu_to_quota(milli) == quota


def test_quota_scales_with_period():
    assert r.milli_cpu_to_quota(500, 50_000) == 25_000


@pytest.mark.parametrize("shares,weight", [(2, 1), (262144, 10000), (1024, 39), (0, 0)])
def test_cpu_weight(shares, weight):
    assert r.cpu_shares_to_weight(shares) == weight


@pytest.mark.parametrize("shares,weight",
                         [(2, 1), (1024, 100), (262144, 10000), (0, 0), (102, 17), (2048, 174)])
def test_cpu_weight_quadratic(shares, weight):
    assert r.cpu_shares_to_weight(shares, "quadratic") == weight


def test_v2_strings():
    assert r.cpu_max(None) == "max 100000"
    assert r.cpu_max(50000) == "50000 100000"
    assert r.memory_max(None) == "max"
    assert r.memory_max(1024) == "1024"


def test_pod_requests_sum_and_init_max():
    p = pod(container("a", requests={"cpu": "100m", "memory": "10Mi"}),
            container("b", requests={"cpu": "200m"}),
            init=[container("i1", requests={"cpu": "1", "memory": "1Mi"}),
                  container("i2", requests={"memory": "50Mi"})])
    reqs = r.pod_requests(p)
    assert reqs["cpu"] == 1  # the init container's 1 cpu exceeds the 300m sum
    assert reqs["memory"] == 50 * 2**20


def test_pod_requests_with_sidecars_and_overhead():
    sidecar = container("s", requests={"cpu": "100m"}, restartPolicy="Always")
    later_init = container("i", requests={"cpu": "500m"})
    p = pod(container("a", requests={"cpu": "200m"}), init=[sidecar, later_init], overhead={"cpu": "10m"})
    # steady state: 200m + 100m sidecar = 300m; init step after the sidecar: 100m + 500m = 600m; + overhead
    assert r.pod_requests(p)["cpu"] == Fraction(610, 1000)


def test_pod_limits_declared():
    assert r.pod_limits_declared(pod(container(limits=G), container("d", limits=G)), "cpu")
    memory_only = pod(container(limits=G), container("d", limits={"memory": "1Mi"}))
    assert not r.pod_limits_declared(memory_only, "cpu")
    assert not r.pod_limits_declared(pod(container(limits=G), init=[container("i")]), "memory")


def test_guaranteed_pod_config():
    cfg = r.pod_resource_config(pod(container(limits=G), container("d", limits=G)))
    assert cfg == r.ResourceConfig(cpu_shares=1024, cpu_quota=100_000, cpu_period=100_000,
                                   memory_limit=256 * 2**20)
    assert cfg.v1_files() == {"cpu.shares": "1024", "cpu.cfs_period_us": "100000",
                              "cpu.cfs_quota_us": "100000",
                              "memory.limit_in_bytes": str(256 * 2**20)}
    assert cfg.v2_files() == {"cpu.weight": "39", "cpu.max": "100000 100000", "memory.max": str(256 * 2**20)}


def test_burstable_pod_config_only_sets_declared_limits():
    p = pod(container(requests={"cpu": "250m"}, limits={"memory": "64Mi"}))
    cfg = r.pod_resource_config(p)
    assert cfg == r.ResourceConfig(cpu_shares=256, cpu_quota=None, cpu_period=None, memory_limit=64 * 2**20)
    p2 = pod(container(requests={"cpu": "250m"}, limits={"cpu": "1"}),
             container("d", requests={"memory": "1Mi"}))
    assert r.pod_resource_config(p2) == r.ResourceConfig(cpu_shares=256)


def test_besteffort_pod_config():
    cfg = r.pod_resource_config(pod(container()))
    assert cfg == r.ResourceConfig(cpu_shares=2)
    assert cfg.v2_files() == {"cpu.weight": "1"}


def test_cfs_quota_disabled():
    cfg = r.pod_resource_config(pod(container(limits=G)), enforce_cpu_limits=False)
    assert cfg.cpu_quota == -1
    assert cfg.v2_files()["cpu.max"] == "max 100000"


def test_container_resources():
    c = container(limits={"cpu": "250m", "memory": "64Mi"})
    out = r.container_resources(pod(c), c, 4 * GiB)
    assert out == {"cpu_shares": 256, "memory_limit_in_bytes": 64 * 2**20, "oom_score_adj": -997,
                   "cpu_period": 100_000, "cpu_quota": 25_000}
    b = container()
    assert r.container_resources(pod(b), b, GiB)["cpu_shares"] == 2
    assert r.container_resources(pod(b), b, GiB)["cpu_quota"] == 0
    assert r.container_resources(pod(b), b, GiB, enforce_cpu_limits=False).keys() == {
        "cpu_shares", "memory_limit_in_bytes", "oom_score_adj"}


def test_oom_score_adj_by_class():
    g = container(limits=G)
    assert r.oom_score_adj(pod(g), g, 4 * GiB) == -997
    be = container()
    assert r.oom_score_adj(pod(be), be, 4 * GiB) == 1000
    b = container(requests={"memory": "1Gi"})
    assert r.oom_score_adj(pod(b), b, 4 * GiB) == 750
    tiny = container(requests={"memory": "1"})
    assert r.oom_score_adj(pod(tiny), tiny, 4 * GiB) == 999  # 1000 is BestEffort's: one less
    huge = container(requests={"memory": "4Gi", "cpu": "1"})
    assert r.oom_score_adj(pod(huge), huge, 4 * GiB) == 3  # floor 1000 + (-997)
    cpu_only = container(requests={"cpu": "1"})
    assert r.oom_score_adj(pod(cpu_only), cpu_only, 4 * GiB) == 999


def test_oom_score_adj_node_critical_and_sidecar():
    b = container(requests={"memory": "1Gi"})
    p = pod(b, priority=2_000_001_000, priorityClassName="system-node-critical")
    assert r.oom_score_adj(p, b, 4 * GiB) == -997
    side = container("s", requests={"memory": "1Mi"}, restartPolicy="Always")
    p = pod(container("a", requests={"memory": "2Gi"}), init=[side])
    assert r.oom_score_adj(p, side, 4 * GiB) == 500


def test_cgroup_names():
    g = pod(container(limits=G), uid="aa-bb")
    b = pod(container(requests={"cpu": "1"}), uid="cc-dd")
    be = pod(container(), uid="ee-ff")
    assert r.pod_cgroup(g).cgroupfs() == "/kubepods/podaa-bb"
    assert r.pod_cgroup(b).cgroupfs() == "/kubepods/burstable/podcc-dd"
    assert r.pod_cgroup(be).cgroupfs() == "/kubepods/besteffort/podee-ff"
    assert r.pod_cgroup(b).systemd() == (
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podcc_dd.slice")
    assert r.pod_cgroup(be, cgroup_root=("nodeagent-x",)).cgroupfs() == (
        "/nodeagent-x/kubepods/besteffort/podee-ff")
    assert r.qos_cgroup("Guaranteed").systemd() == "/kubepods.slice"


def test_qos_cgroup_configs():
    pods = [pod(container(requests={"cpu": "300m"})),
            pod(container(requests={"cpu": "200m", "memory": "1Mi"})),
            pod(container(limits=G)), pod(container())]
    cfg = r.qos_cgroup_configs(pods)
    assert cfg["Burstable"].cpu_shares == 512
    assert cfg["BestEffort"].cpu_shares == 2
    assert r.qos_cgroup_configs([])["Burstable"].cpu_shares == 2


def test_node_allocatable():
    cap = {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    alloc = r.node_allocatable(cap, system_reserved={"cpu": "500m", "memory": "1Gi"},
                               kube_reserved={"cpu": "250m", "memory": "512Mi"},
                               hard_eviction={"memory": 100 * 2**20, "ephemeral-storage": 10 * GiB})
    assert alloc["cpu"] == Fraction(3250, 1000)
    assert alloc["memory"] == 8 * GiB - GiB - 512 * 2**20 - 100 * 2**20
    assert alloc["pods"] == 110
    assert alloc["ephemeral-storage"] == 90 * GiB
    assert r.node_allocatable({"memory": "1Gi"}, system_reserved={"memory": "2Gi"})["memory"] == 0


def test_kubepods_config_excludes_eviction_threshold():
    cfg = r.kubepods_resource_config({"cpu": "2", "memory": "4Gi"}, system_reserved={"memory": "1Gi"})
    assert cfg.memory_limit == 3 * GiB
    assert cfg.cpu_shares == 2048

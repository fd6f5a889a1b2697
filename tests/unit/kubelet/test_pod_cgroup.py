"""The pod<uid> cgroup's pod-level limits, written before the sandbox as the kubelet's pod container
manager does (ResourceConfigForPod), and the QoS classes' shares (qosContainerManager.UpdateCgroups): the
numbers the driver is asked to write."""

from kernel.cgroups.base import Resources
from nodeagent.kubelet.cgroups import ensure_pod_cgroup, update_qos_cgroups
from nodeagent.kubelet.resources import pod_resource_config


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Resources | None]] = []

    def create(self, path: str) -> list[str]:
        self.calls.append(("create", path, None))
        return [path]

    def apply(self, path: str, res: Resources) -> None:
        self.calls.append(("apply", path, res))


def pod(*containers: dict) -> dict:
    return {"metadata": {"uid": "u"}, "spec": {"containers": [
        {"name": f"c{i}", "resources": r} for i, r in enumerate(containers)]}}


def written(p: dict) -> Resources:
    rec = Recorder()
    ensure_pod_cgroup(rec, "/kubepods/burstable/podu", pod_resource_config(p))
    assert rec.calls[0] == ("create", "/kubepods/burstable/podu", None)
    res = rec.calls[1][2]
    assert res is not None
    return res


def test_burstable_with_every_limit_gets_the_quota_arithmetic():
    res = written(pod({"requests": {"cpu": "250m", "memory": "64Mi"},
                       "limits": {"cpu": "500m", "memory": "128Mi"}}))
    assert (res.cpu_shares, res.cpu_quota, res.cpu_period) == (256, 50000, 100000)
    assert res.memory_limit == 134217728


def test_burstable_missing_a_limit_leaves_quota_and_memory_unset():
    res = written(pod({"requests": {"cpu": "250m"}, "limits": {"cpu": "500m", "memory": "128Mi"}},
                      {"requests": {"cpu": "100m"}}))
    assert (res.cpu_shares, res.cpu_quota, res.cpu_period, res.memory_limit) == (358, 0, 0, 0)


def test_best_effort_gets_two_shares():
    res = written(pod({}))
    assert (res.cpu_shares, res.cpu_quota, res.memory_limit) == (2, 0, 0)


def qos_pod(uid: str, *containers: dict) -> dict:
    p = pod(*containers)
    p["metadata"]["uid"] = uid
    return p


def test_burstable_qos_cgroup_gets_the_sum_of_its_pods_cpu_requests():
    rec = Recorder()
    pods = [qos_pod("a", {"requests": {"cpu": "250m"}}),
            qos_pod("b", {"requests": {"cpu": "100m", "memory": "1Mi"}}, {"requests": {"memory": "1Mi"}}),
            qos_pod("g", {"limits": {"cpu": "1", "memory": "1Mi"}}),  # Guaranteed: not summed
            qos_pod("e", {})]
    got = update_qos_cgroups(rec, ("k8s",), pods)
    assert got == {"/k8s/kubepods/burstable": 358, "/k8s/kubepods/besteffort": 2}
    assert [(c[1], c[2].cpu_shares) for c in rec.calls if c[2] is not None] == list(got.items())


def test_burstable_qos_cgroup_without_cpu_requests_gets_the_minimum():
    """No Burstable pod asks for CPU (or there is none): MilliCPUToShares(0) is the minimum, 2, not
    the cgroup's default 1024 (cpu.weight 100 on v2)."""
    rec = Recorder()
    assert update_qos_cgroups(rec, (), [qos_pod("b", {"requests": {"memory": "16Mi"}})]) == {
        "/kubepods/burstable": 2, "/kubepods/besteffort": 2}

"""The pod<uid> cgroup's pod-level limits, written before the sandbox as the kubelet's pod container
manager does (ResourceConfigForPod): the numbers the driver is asked to write."""

from kernel.cgroups.base import Resources
from nodeagent.kubelet.cgroups import ensure_pod_cgroup
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

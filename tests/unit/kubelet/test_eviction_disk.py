"""The eviction manager's admission under pressure and the pods' ephemeral-storage usage it ranks by."""

from __future__ import annotations

from pathlib import Path

from nodeagent.kubelet.eviction import EvictionManager, observations_from, parse_thresholds
from nodeagent.kubelet.eviction.manager import local_storage_violation
from nodeagent.kubelet.eviction.usage import UsagePaths, has_local_limits, pod_usage
from nodeagent.testing.clock import FakeClock
from tests.unit.kubelet.podspecs import container, pod

Mi = 2**20


def _manager(pressure: dict[str, tuple[int, int]]) -> EvictionManager:
    m = EvictionManager(parse_thresholds("memory.available<100Mi,nodefs.available<10%"), FakeClock(0.0))
    m.evaluate(observations_from(pressure))
    return m


def test_memory_pressure_refuses_only_best_effort_pods():
    m = _manager({"memory.available": (10 * Mi, 1000 * Mi), "nodefs.available": (900, 1000)})
    be = pod(container())
    assert m.admit(be) == "The node had condition: [MemoryPressure]. "
    assert m.admit(pod(container(requests={"memory": "1Mi"}))) is None
    tolerant = pod(container(), tolerations=[{"key": "node.kubernetes.io/memory-pressure",
                                              "operator": "Exists", "effect": "NoSchedule"}])
    assert m.admit(tolerant) is None
    static = pod(container())
    static["metadata"]["annotations"] = {"kubernetes.io/config.source": "file"}
    assert m.admit(static) is None  # critical


def test_disk_pressure_refuses_every_pod():
    m = _manager({"memory.available": (10 * Mi, 1000 * Mi), "nodefs.available": (10, 1000)})
    assert m.admit(pod(container(requests={"memory": "1Mi"}))) == \
        "The node had condition: [MemoryPressure DiskPressure]. "
    assert _manager({"memory.available": (900 * Mi, 1000 * Mi), "nodefs.available": (900, 1000)}) \
        .admit(pod(container())) is None


def test_pod_usage_counts_writable_layers_logs_and_disk_empty_dirs(tmp_path: Path):
    p = pod(container("app", limits={"ephemeral-storage": "1Mi"}),
            volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "1Ki"}},
                     {"name": "ram", "emptyDir": {"medium": "Memory"}}])
    assert has_local_limits(p) and not has_local_limits(pod(container()))
    logs, vols = tmp_path / "logs", tmp_path / "volumes"
    (logs / "app").mkdir(parents=True)
    (logs / "app" / "0.log").write_bytes(b"x" * 100)
    (vols / "kubernetes.io~empty-dir" / "scratch").mkdir(parents=True)
    (vols / "kubernetes.io~empty-dir" / "scratch" / "f").write_bytes(b"y" * 4096)
    paths = UsagePaths(None, lambda p: "", lambda p: logs, lambda p: vols)
    u = pod_usage(p, paths, {"app": (1000, 3)})
    assert u is not None
    assert u.containers["app"]["ephemeral-storage"] == 1100
    assert u.volumes == {"scratch": 4096}
    assert u.ephemeral_storage == 1100 + 4096
    assert local_storage_violation(p, u) == 'Usage of EmptyDir volume "scratch" exceeds the limit "1Ki". '


def test_pod_limit_is_the_sum_of_the_declared_limits_then_each_container_its_own():
    p = pod(container("a", limits={"ephemeral-storage": "1Mi"}), container("b"),
            container("c", limits={"ephemeral-storage": "64Mi"}))
    from nodeagent.kubelet.eviction import PodUsage

    over_pod = PodUsage(ephemeral_storage=70 * Mi, containers={"b": {"ephemeral-storage": 70 * Mi}})
    assert local_storage_violation(p, over_pod) == \
        "Pod ephemeral local storage usage exceeds the total limit of containers 65Mi. "
    over_a = PodUsage(ephemeral_storage=4 * Mi, containers={"a": {"ephemeral-storage": 4 * Mi}})
    assert local_storage_violation(p, over_a) == \
        'Container a exceeded its local ephemeral storage limit "1Mi". '

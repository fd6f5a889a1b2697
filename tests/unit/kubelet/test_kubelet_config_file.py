"""--config: a KubeletConfiguration file read strictly, flags given on the command line over it; node
allocatable enforcement's validation and the limits it writes."""

from __future__ import annotations

import pytest
import yaml

from nodeagent.kubelet import node_allocatable
from nodeagent.kubelet.config_file import ConfigFileError, from_document
from tests.unit.test_configs import _agent, _up

Mi = 2**20


def _file(tmp_path, **fields) -> str:
    p = tmp_path / "kubelet.yaml"
    p.write_text(yaml.safe_dump({"apiVersion": "kubelet.config.k8s.io/v1beta1",
                                 "kind": "KubeletConfiguration", **fields}))
    return str(p)


def test_file_fields_become_the_kubelet_config(tmp_path):
    f = _file(tmp_path, evictionHard={"memory.available": "200Mi", "nodefs.available": "5%"},
              evictionSoft={"memory.available": "1Gi"}, evictionSoftGracePeriod={"memory.available": "1m30s"},
              systemReserved={"memory": "100Mi"}, imageGCHighThresholdPercent=70,
              imageGCLowThresholdPercent=60,
              imageMaximumGCAge="24h", cpuManagerPolicy="static", reservedSystemCPUs="0", maxPods=40,
              enforceNodeAllocatable=["pods"], clusterDNS=["10.96.0.53"], syncFrequency="30s",
              nodeLeaseDurationSeconds=8)
    for make in (_up, _agent):
        k = make(tmp_path, "--config", f).kubelet
        assert {(t.signal, str(t.value), t.grace_period) for t in k.thresholds()} == {
            ("memory.available", str(200 * Mi), 0), ("nodefs.available", "5%", 0),
            ("memory.available", str(1024 * Mi), 90.0)}
        assert k.system_reserved == (("memory", "100Mi"),)
        assert k.image_gc_policy().max_age == 86400 and k.image_gc_policy().high_threshold == 70
        assert k.cpu_manager_policy == "static" and k.reserved_cpu_set() == {0} and k.max_pods == 40
        assert k.cluster_dns == ("10.96.0.53",) and k.resync == 30
        assert k.node_lease_duration == 8


def test_flags_given_override_the_file(tmp_path):
    f = _file(tmp_path, maxPods=40, evictionHard={"memory.available": "200Mi"},
              imageGCHighThresholdPercent=90)
    k = _up(tmp_path, "--config", f, "--max-pods", "20", "--eviction-hard", "memory.available<300Mi").kubelet
    assert k.max_pods == 20 and k.eviction_hard == "memory.available<300Mi"
    assert k.image_gc_high_threshold == 90  # not given as a flag: the file's
    assert _up(tmp_path).kubelet.max_pods == 110  # neither: kubelet's default


@pytest.mark.parametrize("fields,says", [
    ({"maxPodz": 3}, 'strict decoding error: unknown field "maxPodz"'),
    ({"featureGates": {"X": True}}, 'field "featureGates" is not implemented by nodeagent'),
    ({"maxPods": "many"}, 'field "maxPods": expected an integer'),
    ({"imageMinimumGCAge": "later"}, 'field "imageMinimumGCAge"'),
    ({"nodeLeaseDurationSeconds": 0}, "nodeLeaseDurationSeconds must be greater than 0"),
])
def test_bad_files_are_refused_with_the_field(tmp_path, fields, says):
    with pytest.raises(SystemExit, match=says):
        _up(tmp_path, "--config", _file(tmp_path, **fields))


def test_wrong_kind_and_missing_file():
    with pytest.raises(ConfigFileError, match='no kind "KubeProxyConfiguration"'):
        from_document({"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration"})
    with pytest.raises(SystemExit, match="failed to read kubelet config file"):
        _up(__import__("pathlib").Path("/tmp"), "--config", "/nonexistent/kubelet.yaml")


@pytest.mark.parametrize("argv,says", [
    (["--enforce-node-allocatable", "pods,disks"], 'option "disks" specified for enforceNodeAllocatable'),
    (["--enforce-node-allocatable", "none,pods"], 'may not contain additional enforcements when "none"'),
    (["--enforce-node-allocatable", "pods,system-reserved"],
     "systemReservedCgroup (--system-reserved-cgroup) must be specified"),
])
def test_enforcement_flags_are_validated_as_kubelet_does(tmp_path, argv, says):
    with pytest.raises(SystemExit, match=says.replace("(", r"\(").replace(")", r"\)")):
        _up(tmp_path, *argv)


class FakeCgroups:
    def __init__(self, existing=()):
        self.applied = {}
        self.existing = set(existing)

    def apply(self, path, res):
        self.applied[path] = res

    def exists(self, path):
        return path in self.existing


def test_enforcement_writes_allocatable_on_kubepods_and_reservations_on_their_cgroups():
    cap = {"cpu": "2", "memory": "4Gi"}
    d = FakeCgroups({"/system.slice"})
    node_allocatable.enforce(d, ("inst",), cap, ("pods", "system-reserved"),
                             {"memory": "1Gi", "cpu": "500m"}, {"memory": "512Mi"}, "/system.slice")
    assert d.applied["/inst/kubepods"].memory_limit == 4 * 1024 * Mi - 1536 * Mi
    assert d.applied["/inst/kubepods"].cpu_shares == 1536
    assert d.applied["/system.slice"].memory_limit == 1024 * Mi
    assert d.applied["/system.slice"].cpu_shares == 512
    d = FakeCgroups()
    node_allocatable.enforce(d, (), cap, ("none",), {"memory": "1Gi"}, {})
    assert d.applied["/kubepods"].memory_limit == 4 * 1024 * Mi  # not enforced: the capacity
    with pytest.raises(node_allocatable.EnforcementError, match='"/kube.slice" cgroup does not exist'):
        node_allocatable.enforce(FakeCgroups(), (), cap, ("kube-reserved",), {}, {"memory": "1Gi"}, "",
                                 "/kube.slice")

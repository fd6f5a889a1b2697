"""Volume stats as the kubelet's metrics providers measure them, their /stats/summary items, and the
kubelet_volume_stats_* families."""

from __future__ import annotations

import os

from nodeagent.kubelet.server.metrics import KubeletMetrics
from nodeagent.kubelet.volumes import VolumeManager
from nodeagent.kubelet.volumes import stats as vstats
from tests.unit.kubelet.podspecs import container, pod


def test_du_counts_each_inode_once_and_statfs_matches_statvfs(tmp_path):
    d = tmp_path / "v"
    d.mkdir()
    (d / "a").write_bytes(b"x" * 10000)
    os.link(d / "a", d / "hard")  # one inode, counted once (du)
    (d / "sub").mkdir()
    (d / "sub" / "b").write_bytes(b"y" * 5000)
    os.symlink("/etc/passwd", d / "link")  # the link itself, never its target
    used, inodes = vstats.du(d)
    blocks = sum(os.lstat(p).st_blocks for p in (d, d / "a", d / "sub", d / "sub" / "b", d / "link"))
    assert used == blocks * 512
    assert inodes == 5  # the dir, a (= hard), sub, b, link
    st = os.statvfs(d)
    fs = vstats.statfs(d)
    assert fs["capacityBytes"] == st.f_blocks * st.f_frsize
    assert fs["inodes"] == st.f_files
    du = vstats.du_stats(d)
    assert du["usedBytes"] == used and du["inodesUsed"] == inodes
    assert du["capacityBytes"] == fs["capacityBytes"]


def test_host_path_and_image_volumes_have_no_stats(tmp_path):
    assert vstats.measure("hostPath", str(tmp_path)) is None
    assert vstats.measure("image", "") is None
    assert vstats.measure("emptyDir", str(tmp_path)) is not None


def test_summary_entry_names_the_claim():
    e = vstats.summary_entry("data", {"usedBytes": 1}, "T", ("ns", "claim"))
    assert e == {"time": "T", "usedBytes": 1, "name": "data", "pvcRef": {"name": "claim", "namespace": "ns"}}
    assert "pvcRef" not in vstats.summary_entry("cache", {}, "T", None)


def test_volume_manager_measures_what_it_set_up(tmp_path):
    vm = VolumeManager(tmp_path / "kubelet")
    p = pod(container("c"), uid="s1")
    p["spec"]["volumes"] = [{"name": "cache", "emptyDir": {}},
                            {"name": "host", "hostPath": {"path": str(tmp_path)}}]
    assert vm.volume_stats(p) == []  # nothing set up yet
    vols = vm.setup_pod(p)
    with open(os.path.join(vols["cache"].host_path, "f"), "wb") as f:
        f.write(b"z" * 65536)
        os.fsync(f.fileno())
    (name, st, pvc), = vm.volume_stats(p)
    assert name == "cache" and pvc is None
    assert st["usedBytes"] >= 65536 and st["inodesUsed"] == 2
    vm.teardown_pod("s1")
    assert vm.volume_stats(p) == []


def test_volume_stats_metrics_per_claim_once():
    m = KubeletMetrics()
    st = {"capacityBytes": 100, "availableBytes": 60, "usedBytes": 40, "inodes": 10, "inodesFree": 7,
          "inodesUsed": 3}
    m.set_volume_source(lambda: [("ns", "data", st), ("ns", "data", st)])
    text = m.exposition().decode()
    assert 'kubelet_volume_stats_capacity_bytes{namespace="ns",persistentvolumeclaim="data"} 100.0' in text
    assert 'kubelet_volume_stats_used_bytes{namespace="ns",persistentvolumeclaim="data"} 40.0' in text
    assert 'kubelet_volume_stats_inodes_free{namespace="ns",persistentvolumeclaim="data"} 7.0' in text
    labels = '{namespace="ns",persistentvolumeclaim="data"}'
    assert f"kubelet_volume_stats_health_status_abnormal{labels} 0.0" in text
    assert text.count("kubelet_volume_stats_available_bytes{") == 1


def test_a_restarted_manager_reconstructs_what_it_can_without_failing_the_pod(tmp_path):
    """After a restart, a running pod's claim being deleted does not fail its sync: the other volumes are
    known again (and measured), the claim's stays as mounted."""
    deleting = {"metadata": {"name": "c", "namespace": "default", "uid": "cu",
                             "deletionTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"volumeName": "pv"}, "status": {"phase": "Bound"}}
    p = pod(container("c"), uid="r1")
    p["spec"]["volumes"] = [{"name": "cache", "emptyDir": {}},
                            {"name": "data", "persistentVolumeClaim": {"claimName": "c"}}]
    VolumeManager(tmp_path / "kubelet").setup_volume(p, p["spec"]["volumes"][0])
    vm = VolumeManager(tmp_path / "kubelet", get_claim=lambda ns, name: deleting)
    assert vm.update_pod(p) == []
    assert [name for name, _, _ in vm.volume_stats(p)] == ["cache"]

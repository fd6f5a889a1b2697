"""FlexVolume and the volume manager against the real kernel: the example bind driver mounts and
unmounts for real, a fresh manager (a restarted kubelet) tears a pod down from what is on disk, a
read-only volume is read-only, and a failing mount leaves nothing behind."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from nodeagent.kubelet.volumes import VolumeError, VolumeManager
from nodeagent.kubelet.volumes import mount as mnt
from nodeagent.kubelet.volumes.flexvolume import DriverProber, FlexVolumePlugin
from tests.unit.kubelet.podspecs import container, pod

pytestmark = pytest.mark.root

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "flexvolume" / "bind"


def manager(root: Path) -> VolumeManager:
    flex = FlexVolumePlugin(DriverProber(root / "exec"), root / "kubelet", "node1")
    return VolumeManager(root / "kubelet", plugins={"flexVolume": flex})


def flex_pod(uid: str, source: str, read_only: bool = False) -> dict:
    p = pod(container("c"), uid=uid)
    p["spec"]["volumes"] = [{"name": "data", "flexVolume": {"driver": "nodeagent/bind", "readOnly": read_only,
                                                            "options": {"source": source}}}]
    return p


@pytest.fixture
def root(res) -> Path:
    root = res.mountpoint()
    (root / "exec" / "nodeagent~bind").mkdir(parents=True)
    shutil.copy(EXAMPLE, root / "exec" / "nodeagent~bind" / "bind")
    return root


def test_bind_driver_mounts_and_a_restarted_manager_unmounts_from_disk(root):
    src = root / "src"
    vols = manager(root).setup_pod(flex_pod("fx1", str(src)))
    target = vols["data"].host_path
    assert mnt.is_mountpoint(target)
    Path(target, "f").write_text("through the mount\n")
    assert (src / "f").read_text() == "through the mount\n"
    again = manager(root)  # a new kubelet: nothing in memory, the pod's volumes found on disk
    again.teardown_pod("fx1")
    assert mnt.mounts_under(root / "kubelet") == []
    assert not (root / "kubelet/pods/fx1").exists()
    assert (src / "f").exists()


def test_read_only_flex_volume_is_read_only(root):
    vols = manager(root).setup_pod(flex_pod("fx2", str(root / "src"), read_only=True))
    with pytest.raises(OSError) as ei:
        Path(vols["data"].host_path, "f").write_text("x")
    assert ei.value.errno == errno.EROFS
    manager(root).teardown_pod("fx2")
    assert mnt.mounts_under(root / "kubelet") == []


def test_a_failing_mount_leaves_no_mount_and_no_dir(root):
    vm = manager(root)
    with pytest.raises(VolumeError) as ei:
        vm.setup_pod(flex_pod("fx3", "relative/path"))
    assert "mount command failed, status: Failure, reason: source relative/path is not an absolute path" in \
        ei.value.event_message
    assert mnt.mounts_under(root / "kubelet") == []
    assert not (root / "kubelet/pods/fx3/volumes/nodeagent~bind/data").exists()
    vm.teardown_pod("fx3")
    assert not (root / "kubelet/pods/fx3").exists()


def test_terminated_pod_volumes_unmounted_its_dir_kept(root):
    vm = manager(root)
    p = flex_pod("fx4", str(root / "src"))
    p["spec"]["volumes"].append({"name": "scratch", "emptyDir": {}})
    vm.setup_pod(p)
    (root / "kubelet/pods/fx4/etc-hosts").write_text("kept\n")
    assert vm.unmount_volumes("fx4") is True
    assert mnt.mounts_under(root / "kubelet") == []
    assert not (root / "kubelet/pods/fx4/volumes").exists()
    assert (root / "kubelet/pods/fx4/etc-hosts").exists()
    assert vm.unmount_volumes("fx4") is False  # nothing left: no work on later syncs
    vm.teardown_pod("fx4")
    assert not os.path.exists(root / "kubelet/pods/fx4")

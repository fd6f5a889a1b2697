"""The kubelet's orphaned pod directories on the real kernel, by kubelet's cleanupOrphanedPodDirs rules: a
directory with no mount left goes whole; the volumes the volume manager knows are unmounted first; a mount
anywhere else below it (a tmpfs, or a bind mount of the same filesystem) keeps the directory, the mount and
what is under it, and says why. The kubelet's 2 s housekeeping tick that calls this is driven in a unit
test; here, the removal itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kernel.mounts import is_mountpoint, mounts_under, remove_all_one_mount, unmount
from nodeagent.kubelet.volumes.manager import VolumeManager

pytestmark = pytest.mark.root


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


@pytest.fixture
def volumes(tmp_path):
    vm = VolumeManager(tmp_path / "kubelet")
    vm.pods_dir().mkdir(parents=True)
    yield vm
    for point in mounts_under(tmp_path):
        unmount(point)


def left_by_a_deleted_pod(vm: VolumeManager, uid: str) -> Path:
    """A pod's directory as a pod deleted while the kubelet was down leaves it: etc-hosts, container
    files, a plugin dir, an emptyDir with data, and its projected service-account volume still mounted."""
    d = vm.pod_dir(uid)
    (d / "containers" / "c").mkdir(parents=True)
    (d / "containers" / "c" / "0f1e").write_text("x")
    (d / "etc-hosts").write_text("127.0.0.1 localhost\n")
    (d / "plugins" / "kubernetes.io~empty-dir" / "wrapped").mkdir(parents=True)
    (d / "volumes" / "kubernetes.io~empty-dir" / "scratch").mkdir(parents=True)
    (d / "volumes" / "kubernetes.io~empty-dir" / "scratch" / "data").write_text("y")
    sa = d / "volumes" / "kubernetes.io~projected" / "kube-api-access-x"
    sa.mkdir(parents=True)
    mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(sa))
    (sa / "token").write_text("t")
    return d


def test_an_orphaned_pod_dir_goes_once_its_volumes_are_unmounted(volumes):
    d = left_by_a_deleted_pod(volumes, "a1")
    assert volumes.remove_orphaned_pod_dir("a1") is None
    assert not d.exists() and not mounts_under(volumes.pods_dir())
    assert volumes.remove_orphaned_pod_dir("a1") is None  # gone already: nothing to do


@pytest.mark.parametrize("how", ["tmpfs", "bind"])
def test_a_mount_outside_the_volumes_keeps_the_dir_and_says_why(volumes, tmp_path, how):
    """kubelet's RemoveAllOneFilesystem never crosses a mount point: the directory, the mount and what is
    under it stay (a bind mount from the same filesystem counts too: mount ids, not devices)."""
    d = left_by_a_deleted_pod(volumes, "b2")
    held = d / "plugins" / "example.com~driver" / "mnt"
    held.mkdir(parents=True)
    if how == "tmpfs":
        mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(held))
    else:
        source = tmp_path / "elsewhere"
        source.mkdir()
        mount("--bind", str(source), str(held))
    (held / "precious").write_text("keep me")
    why = volumes.remove_orphaned_pod_dir("b2")
    assert why == f"cannot remove plugins: cannot delete directory {held}: it is a mount point"
    assert is_mountpoint(held) and (held / "precious").read_text() == "keep me"
    assert not (d / "volumes").exists()  # the volumes went first, as kubelet's do
    unmount(held)
    assert volumes.remove_orphaned_pod_dir("b2") is None and not d.exists()


def test_remove_all_one_mount_refuses_a_mount_point_itself(tmp_path):
    target = tmp_path / "m"
    target.mkdir()
    mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target))
    try:
        with pytest.raises(OSError, match="it is a mount point"):
            remove_all_one_mount(target)
        assert is_mountpoint(target)
    finally:
        unmount(target)
    remove_all_one_mount(target)
    assert not target.exists()
    remove_all_one_mount(target)  # gone already is fine

"""fsGroup ownership of volumes: group, group bits and setgid as the kubelet's SetVolumeOwnership."""

import os
import stat

import pytest

from nodeagent.kubelet.volumes import ownership
from nodeagent.kubelet.volumes.manager import VolumeManager

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another group needs root")


def _tree(root):
    (root / "d").mkdir(parents=True)
    (root / "d" / "f").write_text("x")
    os.chmod(root / "d" / "f", 0o600)
    os.symlink("d/f", root / "link")


def test_always_walks_and_sets_group_bits_and_setgid(tmp_path):
    root = tmp_path / "v"
    _tree(root)
    assert ownership.set_volume_ownership(root, 4321, read_only=False)
    for p in (root, root / "d", root / "d" / "f"):
        assert os.lstat(p).st_gid == 4321
    assert stat.S_IMODE(os.stat(root / "d" / "f").st_mode) == 0o660
    assert os.stat(root / "d").st_mode & stat.S_ISGID and os.stat(root / "d").st_mode & 0o070 == 0o070
    assert os.lstat(root / "link").st_gid == 4321


def test_read_only_volumes_get_group_read_only(tmp_path):
    root = tmp_path / "v"
    _tree(root)
    ownership.set_volume_ownership(root, 4321, read_only=True)
    assert stat.S_IMODE(os.stat(root / "d" / "f").st_mode) == 0o640


def test_on_root_mismatch_skips_a_volume_that_looks_done(tmp_path):
    root = tmp_path / "v"
    _tree(root)
    assert ownership.set_volume_ownership(root, 4321, False, "OnRootMismatch")
    os.chown(root / "d" / "f", -1, 0)  # a file changed later is left alone while the root matches
    assert not ownership.set_volume_ownership(root, 4321, False, "OnRootMismatch")
    assert os.stat(root / "d" / "f").st_gid == 0
    assert ownership.set_volume_ownership(root, 4321, False, "Always")
    assert os.stat(root / "d" / "f").st_gid == 4321


def test_the_volume_manager_owns_empty_dirs_and_projections(tmp_path):
    vm = VolumeManager(tmp_path / "kubelet", get_configmap=lambda ns, n: {"data": {"k": "v"}},
                       secrets_in_memory=False)
    pod = {"metadata": {"uid": "u1", "namespace": "ns"},
           "spec": {"securityContext": {"fsGroup": 2345},
                    "volumes": [{"name": "e", "emptyDir": {}}, {"name": "cm", "configMap": {"name": "x"}},
                                {"name": "h", "hostPath": {"path": str(tmp_path)}}]}}
    vols = vm.setup_pod(pod)
    e, cm = vols["e"].host_path, vols["cm"].host_path
    assert os.stat(e).st_gid == 2345 and os.stat(e).st_mode & stat.S_ISGID
    assert os.stat(e).st_mode & 0o777 == 0o777
    assert os.stat(os.path.join(cm, "k")).st_gid == 2345
    assert os.stat(tmp_path).st_gid != 2345  # hostPath is never touched
    vm.setup_pod(pod)  # a second setup keeps the setgid bit
    assert os.stat(e).st_mode & stat.S_ISGID
    vm.teardown_pod("u1")

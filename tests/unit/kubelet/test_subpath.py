"""subPath safety without mounting (a recording syscall fake): missing directories made without following
symlinks, paths leaving the volume refused before any bind, and the bind made from an opened fd."""

from __future__ import annotations

import os

import pytest

from kernel.testing import RecordingSyscalls
from nodeagent.kubelet.volumes import subpath


def test_safe_make_dir_makes_each_component_with_the_mode(tmp_path):
    vol = tmp_path / "vol"
    vol.mkdir()
    subpath.safe_make_dir(vol, "a/b/c", 0o2775)
    assert (vol / "a/b/c").is_dir()
    assert (os.stat(vol / "a/b").st_mode & 0o7777) == 0o2775


def test_safe_make_dir_refuses_to_follow_a_symlink_out_of_the_volume(tmp_path):
    vol, outside = tmp_path / "vol", tmp_path / "outside"
    vol.mkdir()
    outside.mkdir()
    os.symlink(outside, vol / "link")
    with pytest.raises(subpath.SubPathError) as ei:
        subpath.safe_make_dir(vol, "link/new", 0o755)
    assert "symlink" in str(ei.value)
    assert not (outside / "new").exists()  # nothing made outside
    with pytest.raises(subpath.SubPathError):
        subpath.safe_make_dir(vol, "../x", 0o755)


def test_bind_refuses_a_path_leaving_the_volume_and_binds_an_fd(tmp_path):
    vol, pod_dir = tmp_path / "vol", tmp_path / "pod"
    vol.mkdir()
    pod_dir.mkdir()
    (vol / "inside").mkdir()
    os.symlink("/etc", vol / "escape")
    os.symlink("inside", vol / "relative")  # a symlink that stays inside is followed, as kubelet's
    sc = RecordingSyscalls()
    with pytest.raises(subpath.SubPathError) as ei:
        subpath.bind(pod_dir, str(vol), "escape", "v", "c", 0, sc)
    assert str(ei.value) == f'subpath "/etc" not within volume path "{vol}"'
    assert sc.of("mount") == [] and not (pod_dir / subpath.SUBPATH_DIR).exists()
    target = subpath.bind(pod_dir, str(vol), "relative", "v", "c", 3, sc)
    assert target == str(pod_dir / "volume-subpaths/v/c/3")
    (src, dst, _, flags, _), = sc.of("mount")
    assert src.startswith("/proc/self/fd/") and dst == target and flags & 4096  # MS_BIND
    assert os.path.isdir(target)  # a directory target for a directory


def test_clean_removes_the_tree(tmp_path):
    pod_dir = tmp_path / "pod"
    (pod_dir / "volume-subpaths/v/c").mkdir(parents=True)
    (pod_dir / "volume-subpaths/v/c/0").mkdir()
    (pod_dir / "volume-subpaths/v/c/1").touch()
    subpath.clean(pod_dir, RecordingSyscalls())
    assert not (pod_dir / "volume-subpaths").exists() and pod_dir.exists()

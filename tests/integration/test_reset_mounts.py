"""`nodeagent reset --all` detaches whatever is still mounted under the data dir before removing it (a
pod's volume a stopped kubelet left mounted, a mount inside it; a sandbox's shm whose runtime record was
lost, which the runtime reset starts removes itself at recovery), so the removal never fails with EBUSY
nor reaches into a mounted filesystem."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernel import syscalls
from kernel.mounts import mountinfo

pytestmark = [pytest.mark.root]


def test_reset_all_detaches_mounts_left_under_the_data_dir(tmp_path):
    data = tmp_path / "node"
    volume = data / "kubelet" / "pods" / "gone-uid" / "volumes" / "kubernetes.io~empty-dir" / "cache"
    volume.mkdir(parents=True)
    syscalls.mount("tmpfs", str(volume), "tmpfs", 0, "size=64k")
    (volume / "file").write_text("x")
    inner = volume / "inner"
    inner.mkdir()
    syscalls.mount("inner", str(inner), "tmpfs", 0, "size=64k")
    shm = data / "cri" / "sandboxes" / "gone" / "shm"
    shm.mkdir(parents=True)
    syscalls.mount("shm", str(shm), "tmpfs", 0, "size=64k")
    try:
        p = subprocess.run([sys.executable, "-m", "nodeagent", "reset", "--data-dir", str(data), "--all"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"mount {inner}: detached" in p.stdout and f"mount {volume}: detached" in p.stdout
        assert not [m for m in mountinfo() if m.point.startswith(str(data))]
        assert not data.exists()
    finally:
        for m in reversed([m.point for m in mountinfo() if m.point.startswith(str(data))]):
            syscalls.umount(m, syscalls.MNT_DETACH)

"""Volumes against the real kernel: tmpfs emptyDir with sizeLimit,
and atomic configMap swaps under a reader."""

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nodeagent.kubelet.volumes import VolumeManager
from nodeagent.kubelet.volumes import mount as mnt
from tests.unit.kubelet.podspecs import container, pod

pytestmark = pytest.mark.root


def memory_pod(uid: str, size_limit: str | None = None, mem_limit: str | None = None) -> dict:
    src = {"medium": "Memory"}
    if size_limit:
        src["sizeLimit"] = size_limit
    p = pod(container("app", limits={"memory": mem_limit} if mem_limit else None), uid=uid)
    p["spec"]["volumes"] = [{"name": "cache", "emptyDir": src}, {"name": "disk", "emptyDir": {}}]
    return p


def test_tmpfs_empty_dir_size_limit_and_teardown(res):
    root = res.mountpoint()
    vm = VolumeManager(root, node_allocatable={"memory": "1Gi"})
    vols = vm.setup_pod(memory_pod("pod-tmpfs-1", size_limit="8Mi"))
    cache = vols["cache"].host_path
    assert mnt.fs_type(cache) == "tmpfs"
    assert "size=8192k" in mnt.mount_options(cache)
    assert oct(os.stat(cache).st_mode & 0o777) == oct(0o777)
    assert mnt.fs_type(vols["disk"].host_path) is None  # a plain directory on the node's disk
    # the limit is the kernel's: 4 MiB fits, 16 MiB does not
    Path(cache, "small").write_bytes(b"x" * (4 << 20))
    with pytest.raises(OSError) as ei, open(Path(cache, "big"), "wb") as f:
        f.write(b"y" * (16 << 20))
        f.flush()
    assert ei.value.errno == errno.ENOSPC
    # setting up again (every sync does) does not stack a second mount
    vm.setup_pod(memory_pod("pod-tmpfs-1", size_limit="8Mi"))
    assert mnt.mounts_under(cache) == [os.path.realpath(cache)]
    vm.teardown_pod("pod-tmpfs-1")
    assert mnt.mounts_under(root) == []
    assert not Path(root, "pods/pod-tmpfs-1").exists()


def test_tmpfs_defaults_to_pod_memory_limit(res):
    root = res.mountpoint()
    vm = VolumeManager(root, node_allocatable={"memory": "1Gi"})
    vols = vm.setup_pod(memory_pod("pod-tmpfs-2", mem_limit="16Mi"))
    assert "size=16384k" in mnt.mount_options(vols["cache"].host_path)
    vm.teardown_pod("pod-tmpfs-2")
    assert mnt.mounts_under(root) == []


def test_teardown_unmounts_busy_tmpfs(res):
    root = res.mountpoint()
    vm = VolumeManager(root)
    vols = vm.setup_pod(memory_pod("pod-tmpfs-3", size_limit="1Mi"))
    f = open(Path(vols["cache"].host_path, "held"), "w")
    try:
        vm.teardown_pod("pod-tmpfs-3")
    finally:
        f.close()
    assert mnt.mounts_under(root) == []
    assert not Path(root, "pods/pod-tmpfs-3").exists()


READER = textwrap.dedent("""
    import os, sys
    path, stop, good = sys.argv[1], sys.argv[2], set(sys.argv[3].split(","))
    reads = bad = 0
    seen = set()
    print("ready", flush=True)
    while not os.path.exists(stop):
        try:
            with open(path) as f:
                data = f.read()
        except OSError as e:
            bad += 1
            print("ERR", e, flush=True)
            continue
        reads += 1
        key = data[:1] + str(len(data))
        seen.add(data[:1])
        if data[:1] * len(data) != data or data[:1] not in good or len(data) != 200000:
            bad += 1
    print(reads, bad, "".join(sorted(seen)), flush=True)
""")


def test_configmap_swap_is_atomic_for_a_reader(res):
    root = res.mountpoint()
    store = {"data": {"key": "A" * 200000}}
    vm = VolumeManager(root, get_configmap=lambda ns, n: store)
    p = pod(container(), uid="pod-atomic")
    p["spec"]["volumes"] = [{"name": "cfg", "configMap": {"name": "c"}}]
    target = Path(vm.setup_pod(p)["cfg"].host_path) / "key"
    stop = Path(root, "stop")
    reader = res.process([sys.executable, "-c", READER, str(target), str(stop), "A,B,C,D"],
                         stdout=subprocess.PIPE, text=True)
    assert reader.stdout.readline().strip() == "ready"
    swaps = 0
    for letter in "BCDA" * 40:
        store["data"]["key"] = letter * 200000
        assert vm.update_pod(p) == ["cfg"]
        swaps += 1
    stop.touch()
    out, _ = reader.communicate(timeout=30)
    reads, bad, seen = out.split()[-3:]
    assert int(bad) == 0, out
    assert int(reads) > 0
    assert len(seen) >= 2, out  # the reader really read across swaps
    assert swaps == 160
    # the current payload and the one it replaced remain, nothing older
    names = os.listdir(target.parent)
    gens = [n for n in names if n.startswith("..") and n != "..data"]
    assert len(gens) == 2 and os.readlink(target.parent / "..data") in gens
    vm.teardown_pod("pod-atomic")
    assert not Path(root, "pods").joinpath("pod-atomic").exists()


def test_secret_and_projected_volumes_live_on_tmpfs(res):
    import base64

    root = res.mountpoint()
    secret = {"data": {"password": base64.b64encode(b"s3cret").decode()}}
    vm = VolumeManager(root, get_secret=lambda ns, n: secret,
                       get_configmap=lambda ns, n: {"data": {"a": "1"}})
    p = pod(container("app", limits={"memory": "32Mi"}), uid="pod-secret-1")
    p["spec"]["volumes"] = [{"name": "creds", "secret": {"secretName": "db"}},
                            {"name": "all", "projected": {"sources": [{"secret": {"name": "db"}},
                                                                      {"configMap": {"name": "c"}}]}},
                            {"name": "cfg", "configMap": {"name": "c"}}]
    vols = vm.setup_pod(p)
    assert mnt.fs_type(vols["creds"].host_path) == "tmpfs"
    assert "size=32768k" in mnt.mount_options(vols["creds"].host_path)
    assert mnt.fs_type(vols["all"].host_path) == "tmpfs"
    assert mnt.fs_type(vols["cfg"].host_path) is None  # configMaps stay on disk, as in kubelet
    assert Path(vols["creds"].host_path, "password").read_bytes() == b"s3cret"
    secret["data"]["password"] = base64.b64encode(b"rotated").decode()
    assert vm.update_pod(p) == ["creds", "all"]
    assert Path(vols["all"].host_path, "password").read_bytes() == b"rotated"
    assert len(mnt.mounts_under(Path(root, "pods/pod-secret-1"))) == 2  # re-projection does not stack mounts
    vm.teardown_pod("pod-secret-1")
    assert mnt.mounts_under(root) == []
    assert not Path(root, "pods/pod-secret-1").exists()


def test_is_mountpoint_sees_tmpfs_and_same_filesystem_binds(res):
    """The two-stat shortcut (another device than the parent) and mountinfo for what it cannot see: a bind
    mount of a directory of the same filesystem keeps the parent's device."""
    from kernel.mounts import bind

    root = res.mountpoint()
    plain, tmp, src, bound = (root / n for n in ("plain", "tmp", "src", "bound"))
    for d in (plain, tmp, src, bound):
        d.mkdir()
    assert not mnt.is_mountpoint(plain)
    mnt.mount_tmpfs(tmp, 1 << 20)
    assert mnt.is_mountpoint(tmp)
    bind(str(src), str(bound))
    assert os.stat(bound).st_dev == os.stat(root).st_dev and mnt.is_mountpoint(bound)
    assert not mnt.is_mountpoint(root / "missing")
    for d in (tmp, bound):
        mnt.unmount(d)
    assert not mnt.is_mountpoint(tmp) and not mnt.is_mountpoint(bound)

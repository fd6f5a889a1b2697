"""kernel.mounts: mountinfo parsed once, and the cgroup layout read from it."""

from __future__ import annotations

from kernel import cgroups, mounts

SAMPLE = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:26 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate
32 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:11 - cgroup cgroup rw,cpu,cpuacct
33 30 0:29 / /sys/fs/cgroup/systemd rw,nosuid shared:12 - cgroup cgroup rw,xattr,name=systemd
34 22 0:30 / /mnt/with\\040space rw - tmpfs none rw,size=1024k
"""


def test_mountinfo_fields_and_escapes(tmp_path):
    p = tmp_path / "mountinfo"
    p.write_text(SAMPLE)
    got = mounts.mountinfo(str(p))
    assert [m.point for m in got][-1] == "/mnt/with space"
    assert got[3] == mounts.Mount("/sys/fs/cgroup/cpu,cpuacct", "cgroup", "cgroup", "rw,cpu,cpuacct")


def test_hybrid_cgroup_layout_from_the_mount_table(tmp_path, monkeypatch):
    p = tmp_path / "mountinfo"
    p.write_text(SAMPLE)
    monkeypatch.setattr(cgroups, "mountinfo", lambda: mounts.mountinfo(str(p)))
    info = cgroups.detect_cgroups()
    assert info.version == "v1" and info.hybrid and info.v2_root == "/sys/fs/cgroup/unified"
    cpu = "/sys/fs/cgroup/cpu,cpuacct"
    assert info.v1_controllers == {"cpu": cpu, "cpuacct": cpu}


def test_is_mountpoint_asks_the_kernels_mount_ids(tmp_path):
    """A mount root is on another mount than its parent (the kernel's mnt_id); a plain directory, a missing
    path and a file are not; "/" is."""
    assert mounts.is_mountpoint("/proc") and mounts.is_mountpoint("/")
    assert mounts.mount_id("/proc") != mounts.mount_id("/")
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x")
    assert not mounts.is_mountpoint(tmp_path / "d")
    assert not mounts.is_mountpoint(tmp_path / "f")
    assert not mounts.is_mountpoint(tmp_path / "missing")
    (tmp_path / "to-proc").symlink_to("/proc")  # resolved: the mount at its target
    (tmp_path / "to-d").symlink_to(tmp_path / "d")
    assert mounts.is_mountpoint(tmp_path / "to-proc") and not mounts.is_mountpoint(tmp_path / "to-d")
    assert mounts.is_mountpoint("/proc/self/..")  # "/proc" by another name
    table = {m.point for m in mounts.mountinfo()}
    for point in ("/proc", "/sys", "/dev"):  # the same answer as the mount table's
        assert mounts.is_mountpoint(point) == (point in table)

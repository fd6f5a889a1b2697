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

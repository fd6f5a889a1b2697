"""`nodeagent doctor` reports what the kernel really has, checked against independent evidence."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.root


def _doctor():
    p = subprocess.run([sys.executable, "-m", "nodeagent", "doctor", "-o", "json"], capture_output=True,
                       text=True, check=True)
    return json.loads(p.stdout)


def test_doctor_matches_the_kernel():
    d = _doctor()
    cg = d["cgroups"]
    fs_type = subprocess.run(["stat", "-f", "-c", "%T", "/sys/fs/cgroup"], capture_output=True,
                             text=True).stdout.strip()
    if fs_type == "cgroup2fs":
        assert cg["version"] == "v2"
    else:
        assert cg["version"] == "v1"
        assert cg["hybrid"] == os.path.ismount("/sys/fs/cgroup/unified")
    assert d["features"]["ipvs"]["available"] == os.path.exists("/proc/net/ip_vs")
    nft_ok = subprocess.run(["nft", "list", "tables"], capture_output=True).returncode == 0
    assert d["features"]["nftables"]["available"] == nft_ok
    overlay = "overlay" in open("/proc/filesystems").read()
    assert d["features"]["overlayfs"]["available"] == overlay


def test_doctor_text_mentions_what_will_be_used():
    p = subprocess.run([sys.executable, "-m", "nodeagent", "doctor"], capture_output=True,
                       text=True, check=True)
    assert "cgroup driver" in p.stdout
    assert "ipvs" in p.stdout


def test_probe_leaves_no_links_behind():
    before = set(os.listdir("/sys/class/net"))
    _doctor()
    assert set(os.listdir("/sys/class/net")) == before

"""Every resource fixture makes a real kernel object and removes it."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.harness.resources import Resources

pytestmark = pytest.mark.root


def _links(netns=None):
    cmd = ["ip"] + (["-n", netns] if netns else []) + ["-o", "link", "show"]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def test_netns_veth_bridge_lifecycle():
    r = Resources()
    ns = r.netns()
    a, b = r.veth(peer_netns=ns)
    br = r.bridge()
    assert os.path.exists(f"/run/netns/{ns}")
    assert f" {a}@" in _links() and f" {b}@" in _links(ns)
    assert f" {br}:" in _links()
    assert "lo: <LOOPBACK,UP" in _links(ns)
    r.close()
    assert not os.path.exists(f"/run/netns/{ns}")
    assert a not in _links() and br not in _links()


def test_cgroup_lifecycle(host):
    r = Resources()
    paths = r.cgroup()
    for p in paths.values():
        assert (p / "cgroup.procs").exists()
    proc = subprocess.Popen(["sleep", "60"])
    target = paths.get("pids") or paths.get("unified")
    assert target, paths
    (target / "cgroup.procs").write_text(str(proc.pid))
    r.close()  # kills what is inside, then removes the cgroup
    proc.wait(timeout=5)
    for p in paths.values():
        assert not p.exists()


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_iptables_chain_lifecycle(require, backend):
    require(f"iptables-{backend}")
    r = Resources()
    chain = r.iptables_chain("filter", backend)
    cmd = f"iptables-{backend}"
    subprocess.run([cmd, "-w", "-A", "INPUT", "-j", chain], check=True)
    subprocess.run([cmd, "-w", "-A", chain, "-p", "tcp", "--dport", "9", "-j", "RETURN"], check=True)
    assert chain in subprocess.run([cmd, "-w", "-S"], capture_output=True, text=True).stdout
    r.close()  # removes the jump that references it too
    assert chain not in subprocess.run([cmd, "-w", "-S"], capture_output=True, text=True).stdout


def test_nft_table_lifecycle(require):
    require("nftables")
    r = Resources()
    t = r.nft_table()
    assert t in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    r.close()
    assert t not in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout


def test_mountpoint_lifecycle():
    r = Resources()
    m = r.mountpoint()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(m)], check=True)
    sub = m / "sub"
    sub.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(sub)], check=True)
    r.close()
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(m) not in mounts
    assert not m.exists()


def test_process_lifecycle():
    r = Resources()
    p = r.process(["sleep", "60"])
    assert p.poll() is None
    r.close()
    assert p.returncode is not None

"""`nodeagent lab` naming: per-dir unique, kernel-valid names and addresses; the command argv it runs."""

from __future__ import annotations

import ipaddress

import pytest

from nodeagent.lab.cluster import node_command
from nodeagent.lab.topology import topology


def test_names_fit_the_kernel_and_differ_between_labs(tmp_path):
    a, b = topology(tmp_path / "a", 3), topology(tmp_path / "b", 3)
    assert a.tag != b.tag and a.bridge != b.bridge
    for t in (a, b):
        names = [t.bridge, *(n.host_veth for n in t.nodes),
                 *(f"{n.host_veth[:8]}p{n.index}" for n in t.nodes)]
        assert all(len(x) <= 15 for x in names)
        assert len(set(names)) == len(names)
    assert {n.netns for n in a.nodes}.isdisjoint({n.netns for n in b.nodes})


def test_addresses_share_one_underlay(tmp_path):
    t = topology(tmp_path, 3)
    net = ipaddress.ip_network(f"{t.subnet_prefix}.0/24")
    assert all(ipaddress.ip_address(n.address) in net for n in t.nodes)
    assert ipaddress.ip_address(t.host_address) in net
    assert t.server_address == t.nodes[0].address
    assert t.server_url.startswith(f"https://{t.nodes[0].address}:")
    assert len({n.data_dir for n in t.nodes}) == 3


def test_node_count_is_bounded(tmp_path):
    with pytest.raises(ValueError):
        topology(tmp_path, 0)


def test_node_processes_run_in_the_node_netns_with_their_own_mount_namespace(tmp_path):
    n = topology(tmp_path, 1).nodes[0]
    argv = node_command(n, ["python", "-m", "nodeagent", "agent"])
    assert argv[:2] == ["nsenter", f"--net=/run/netns/{n.netns}"]
    assert "unshare" in argv and "--mount" in argv and argv[-4:] == ["python", "-m", "nodeagent", "agent"]

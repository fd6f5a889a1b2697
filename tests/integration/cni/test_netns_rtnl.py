"""The namespace-switching thread and the raw rtnetlink writer, on the real kernel."""

from __future__ import annotations

import errno
import os

import pytest

from cni.errors import CNIError
from cni.plugins.bridge import open_netns
from kernel import netns, rtnl
from tests.integration.cni.conftest import in_ns

pytestmark = pytest.mark.root


def _ns_id(path: str = "/proc/thread-self/ns/net") -> int:
    return os.stat(path).st_ino  # the nsfs inode names the namespace


def test_run_in_enters_the_netns_on_its_own_thread_and_never_leaks_it(res):
    name = res.netns()
    fd = open_netns(f"/run/netns/{name}")
    try:
        mine = _ns_id()
        inside = netns.run_in(fd, _ns_id)
        assert inside == _ns_id(f"/run/netns/{name}") != mine
        with pytest.raises(ZeroDivisionError):
            netns.run_in(fd, lambda: 1 / 0)
        assert _ns_id() == mine  # the caller's thread never moved
    finally:
        os.close(fd)
    with pytest.raises(CNIError) as e:
        open_netns("/run/netns/does-not-exist")
    assert e.value.code == 3


def test_rtnl_configures_inside_the_netns_and_reports_errors(res):
    name = res.netns()
    host, peer = res.veth(peer_netns=name)
    fd = open_netns(f"/run/netns/{name}")
    try:
        s = netns.run_in(fd, rtnl.open_socket)
    finally:
        os.close(fd)
    with s:
        idx = int(in_ns(name, "cat", f"/sys/class/net/{peer}/ifindex").stdout)
        rtnl.configure(s, idx, ["10.123.45.2/24", "fd00:99::2/64"], [("0.0.0.0/0", "10.123.45.1")])
        rtnl.configure(s, idx, ["10.123.45.2/24"], [])  # again: EEXIST is fine
        with pytest.raises(OSError) as e:
            rtnl.configure(s, 999999, ["10.123.46.2/24"], [])
        assert e.value.errno == errno.ENODEV
    addrs = in_ns(name, "ip", "addr", "show", peer).stdout
    assert "10.123.45.2/24" in addrs and "fd00:99::2/64" in addrs and "UP" in addrs
    assert "default via 10.123.45.1" in in_ns(name, "ip", "route").stdout
    assert "10.123.45.2" not in os.popen("ip -4 addr").read()  # nothing landed in the host netns
    assert rtnl.delete(host) is True and rtnl.delete(host) is False

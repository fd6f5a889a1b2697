import ipaddress
import os
import threading

import pytest

from cni.errors import CNIError
from cni.ipam import allocator, config
from cni.ipam.store import DiskStore, MemoryStore
from cni.plugins import host_local


def cfg(ranges, **ipam):
    return config.parse({"name": "n1", "ipam": {"type": "x", "ranges": ranges, **ipam}})


def ips(it):
    return [str(i) for i in it]


def test_range_defaults_skip_network_gateway_broadcast():
    c = cfg([[{"subnet": "10.1.0.0/29"}]])
    r = c.range_sets[0][0]
    assert (str(r.start), str(r.end), str(r.gateway)) == ("10.1.0.1", "10.1.0.6", "10.1.0.1")
    assert ips(allocator.candidates(c.range_sets[0], None)) == [f"10.1.0.{i}" for i in range(2, 7)]


def test_round_robin_continues_after_last_and_wraps_across_ranges():
    rs = cfg([[{"subnet": "10.1.0.0/29"},
               {"subnet": "10.2.0.0/29", "rangeStart": "10.2.0.3", "rangeEnd": "10.2.0.4"}]])
    got = ips(allocator.candidates(rs.range_sets[0], ipaddress.ip_address("10.1.0.5")))
    assert got == ["10.1.0.6", "10.2.0.3", "10.2.0.4", "10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5"]
    got = ips(allocator.candidates(rs.range_sets[0], ipaddress.ip_address("10.2.0.4")))
    assert got[0] == "10.1.0.2" and len(got) == 7


def test_ipv6_range():
    c = cfg([[{"subnet": "fd00:1::/120"}]])
    first = next(allocator.candidates(c.range_sets[0], None))
    assert str(first) == "fd00:1::2"


@pytest.mark.parametrize("bad", [
    [[{"subnet": "nope"}]],
    [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.1.1"}]],
    [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.9", "rangeEnd": "10.0.0.3"}]],
    [[{"subnet": "10.0.0.0/24"}, {"subnet": "fd00::/64"}]],
    [[{"subnet": "10.0.0.0/24"}, {"subnet": "10.0.0.0/25"}]],
    [],
])
def test_bad_config_is_code_7(bad):
    with pytest.raises(CNIError) as e:
        cfg(bad)
    assert e.value.code == 7


def test_legacy_top_level_subnet():
    c = config.parse({"name": "n", "ipam": {"type": "x", "subnet": "10.9.0.0/24", "gateway": "10.9.0.254"}})
    assert str(c.range_sets[0][0].gateway) == "10.9.0.254"


@pytest.mark.parametrize("make_store", ["memory", "disk"])
def test_allocate_release_gc_roundrobin(make_store, tmp_path):
    store = MemoryStore() if make_store == "memory" else DiskStore(str(tmp_path), "n1")
    c = cfg([[{"subnet": "10.1.0.0/29"}], [{"subnet": "fd00::/125"}]])
    a = host_local.allocate(store, c, ("c1", "eth0"))
    assert [str(ip) for ip, _ in a] == ["10.1.0.2", "fd00::2"]
    again = host_local.allocate(store, c, ("c1", "eth0"))
    assert [str(ip) for ip, _ in again] == ["10.1.0.2", "fd00::2"]  # a retried ADD is not a second lease
    b = host_local.allocate(store, c, ("c2", "eth0"))
    assert [str(ip) for ip, _ in b] == ["10.1.0.3", "fd00::3"]
    host_local.release(store, ("c1", "eth0"))
    d = host_local.allocate(store, c, ("c3", "eth0"))
    assert str(d[0][0]) == "10.1.0.4"  # round-robin: the freed .2 is not reused at once
    freed = host_local.gc(store, {("c3", "eth0")})
    assert sorted(freed) == ["10.1.0.3", "fd00::3"]
    assert set(store.owners().values()) == {("c3", "eth0")}


def test_exhaustion_is_all_or_nothing():
    store = MemoryStore()
    c = cfg([[{"subnet": "10.1.0.0/30"}], [{"subnet": "10.2.0.0/29"}]])  # one usable address in set 0
    host_local.allocate(store, c, ("c1", "eth0"))
    with pytest.raises(CNIError) as e:
        host_local.allocate(store, c, ("c2", "eth0"))
    assert "no IP addresses available" in e.value.msg
    assert set(store.owners().values()) == {("c1", "eth0")}


def test_disk_store_is_reference_format_and_exclusive(tmp_path):
    s = DiskStore(str(tmp_path), "n1")
    with s.lock():
        assert s.reserve("10.0.0.2", ("cid", "eth0"), 0)
        assert not s.reserve("10.0.0.2", ("other", "eth0"), 0)
    with open(tmp_path / "n1" / "10.0.0.2", "rb") as f:
        assert f.read() == b"cid\r\neth0"
    assert (tmp_path / "n1" / "last_reserved_ip.0").read_text() == "10.0.0.2"
    (tmp_path / "n1" / ".tmp-10.0.0.3.1.1").write_text("junk")  # a killed writer's leftover
    with s.lock():
        assert s.cleanup_partial() == 1
    assert s.owners() == {"10.0.0.2": ("cid", "eth0")}


def test_disk_store_threads_never_share_an_address(tmp_path):
    c = cfg([[{"subnet": "10.1.0.0/24"}]])
    out, errs = [], []

    def work(i):
        try:
            store = DiskStore(str(tmp_path), "n1")
            out.append(str(host_local.allocate(store, c, (f"c{i}", "eth0"))[0][0]))
        except Exception as e:
            errs.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(40)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs
    assert len(out) == len(set(out)) == 40
    assert len([n for n in os.listdir(tmp_path / "n1") if n.startswith("10.")]) == 40

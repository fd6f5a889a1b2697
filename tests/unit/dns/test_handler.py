"""The wire-level handler and the forwarder's cache, without sockets."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdatatype as T
import dns.rrset

from nodeagent.clock import REAL_CLOCK, Clock
from nodeagent.dns.forward import Forwarder, parse_upstream, resolv_conf_nameservers
from nodeagent.dns.records import ClusterRecords, dict_lister
from nodeagent.dns.server import Handler, split_hostport
from nodeagent.testing.clock import FakeClock
from nodeagent.testing.dns_objects import endpoint_slice, ep, namespace, service


def objects(n_endpoints: int = 3) -> dict[str, list]:
    return {"namespaces": [namespace("web")],
            "services": [service("api", "web", "10.96.0.20"), service("many", "web", "None")],
            "endpointslices": [endpoint_slice("many", "web", [ep(f"10.244.{i // 250}.{i % 250 + 1}")
                                                              for i in range(n_endpoints)])]}


def query(name: str, qtype: T.RdataType = T.A, **kw) -> dns.message.Message:
    return dns.message.make_query(name, qtype, **kw)


Ask = Callable[[dns.name.Name, int, int], Awaitable[dns.message.Message | None]]


class ScriptedForwarder(Forwarder):
    """A Forwarder whose upstream is the test's coroutine `ask` (which a test may swap)."""

    def __init__(self, ask: Ask, clock: Clock = REAL_CLOCK) -> None:
        super().__init__([("192.0.2.1", 53)], clock=clock)
        self.ask = ask

    async def _ask(self, qname: dns.name.Name, qtype: int, qclass: int) -> dns.message.Message | None:
        return await self.ask(qname, qtype, qclass)


def run(h: Handler, q: dns.message.Message, udp: bool = True) -> dns.message.Message:
    out = h.handle(q.to_wire(), udp)
    assert isinstance(out, bytes)
    return dns.message.from_wire(out)


def test_answer_flags_and_id():
    h = Handler(ClusterRecords(dict_lister(objects())), None)
    q = query("api.web.svc.cluster.local")
    r = run(h, q)
    assert r.id == q.id and r.flags & dns.flags.QR and r.flags & dns.flags.AA and r.flags & dns.flags.RA
    assert [rd.to_text() for rd in r.answer[0]] == ["10.96.0.20"]
    nx = run(h, query("nope.web.svc.cluster.local"))
    assert nx.rcode() == dns.rcode.NXDOMAIN and nx.authority[0].rdtype == T.SOA


def test_wire_cache_keeps_the_id_and_is_dropped_on_change():
    objs = objects()
    recs = ClusterRecords(dict_lister(objs))
    h = Handler(recs, None)
    q1, q2 = query("api.web.svc.cluster.local"), query("api.web.svc.cluster.local")
    run(h, q1)
    r2 = run(h, q2)
    assert h.stats.wire_hits == 1 and r2.id == q2.id
    objs["services"][0]["spec"]["clusterIP"] = objs["services"][0]["spec"]["clusterIPs"][0] = "10.96.0.77"
    recs.invalidate()
    assert [rd.to_text() for rd in run(h, query("api.web.svc.cluster.local")).answer[0]] == ["10.96.0.77"]
    assert h.stats.wire_hits == 1


def test_truncation_over_udp_only():
    h = Handler(ClusterRecords(dict_lister(objects(100))), None)
    r = run(h, query("many.web.svc.cluster.local", use_edns=False))
    assert r.flags & dns.flags.TC and not r.answer and r.rcode() == dns.rcode.NOERROR
    t = run(h, query("many.web.svc.cluster.local", use_edns=False), udp=False)
    assert not t.flags & dns.flags.TC and len(t.answer[0]) == 100
    big = run(h, query("many.web.svc.cluster.local", use_edns=0, payload=4096))  # EDNS0: fits in 4096
    assert not big.flags & dns.flags.TC and len(big.answer[0]) == 100 and big.edns == 0
    small = run(h, query("many.web.svc.cluster.local", use_edns=0, payload=1232))
    assert small.flags & dns.flags.TC


def test_formerr_notimp_and_garbage():
    h = Handler(ClusterRecords(dict_lister(objects())), None)
    assert h.handle(b"\x01", True) is None
    bad = h.handle(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xff", True)
    assert isinstance(bad, bytes) and bad[:2] == b"\x12\x34" and bad[3] & 0x0F == dns.rcode.FORMERR
    q = query("api.web.svc.cluster.local")
    q.set_opcode(dns.opcode.NOTIFY)
    assert run(h, q).rcode() == dns.rcode.NOTIMP
    assert run(h, query("cluster.local", T.AXFR)).rcode() == dns.rcode.REFUSED


async def test_outside_names_without_upstream_are_refused():
    h = Handler(ClusterRecords(dict_lister(objects())), None)
    out = h.handle(query("example.org").to_wire(), True)
    assert inspect.isawaitable(out)
    wire = await out
    assert wire is not None and dns.message.from_wire(wire).rcode() == dns.rcode.REFUSED


async def test_forwarder_cache_honours_and_ages_ttls():
    clock = FakeClock()
    asked = []

    async def fake_ask(qname, qtype, qclass):
        asked.append(qname.to_text())
        r = dns.message.make_response(query(qname.to_text(), qtype))
        r.answer.append(dns.rrset.from_text(qname, 60, "IN", "A", "198.51.100.7"))
        return r

    fw = ScriptedForwarder(fake_ask, clock)
    name = dns.name.from_text("www.example.org")
    a = await fw.resolve(name, T.A)
    clock.advance(20)
    b = await fw.resolve(dns.name.from_text("WWW.example.org"), T.A)
    assert a and b
    assert asked == ["www.example.org."] and b.answer[0].ttl == 40 and a.answer[0].ttl == 60
    clock.advance(41)
    await fw.resolve(name, T.A)
    assert len(asked) == 2


async def test_forwarder_negative_cache_needs_soa_and_servfail_is_not_cached():
    clock = FakeClock()
    calls = {"n": 0}

    async def nx(qname, qtype, qclass):
        calls["n"] += 1
        r = dns.message.make_response(query(qname.to_text(), qtype))
        r.set_rcode(dns.rcode.NXDOMAIN)
        if qname.to_text().startswith("soa"):
            r.authority.append(dns.rrset.from_text("example.org.", 300, "IN", "SOA",
                                                   "ns. host. 1 2 3 4 15"))
        return r

    fw = ScriptedForwarder(nx, clock)
    for _ in range(2):
        await fw.resolve(dns.name.from_text("soa.example.org"), T.A)
        await fw.resolve(dns.name.from_text("nosoa.example.org"), T.A)
    assert calls["n"] == 3  # the SOA one cached (for min(300, 15) s), the other not
    clock.advance(16)
    await fw.resolve(dns.name.from_text("soa.example.org"), T.A)
    assert calls["n"] == 4

    async def down(qname, qtype, qclass):
        calls["n"] += 1
        return None

    fw.ask = down
    assert await fw.resolve(dns.name.from_text("x.example.org"), T.A) is None
    assert await fw.resolve(dns.name.from_text("x.example.org"), T.A) is None
    assert calls["n"] == 6


def test_address_parsing(tmp_path):
    assert parse_upstream("1.1.1.1") == ("1.1.1.1", 53)
    assert parse_upstream("127.0.0.1:5353") == ("127.0.0.1", 5353)
    assert parse_upstream("[fd00::1]:54") == ("fd00::1", 54)
    assert parse_upstream("fd00::1") == ("fd00::1", 53)
    assert split_hostport("127.0.0.1:0") == ("127.0.0.1", 0)
    assert split_hostport("[::1]:53") == ("::1", 53)
    p = tmp_path / "resolv.conf"
    p.write_text("search x\nnameserver 192.0.2.1\nnameserver fe80::1%eth0\n")
    assert resolv_conf_nameservers(p) == [("192.0.2.1", 53), ("fe80::1", 53)]
    assert resolv_conf_nameservers(tmp_path / "missing") == []


def test_config_from_a_server_config():
    from nodeagent.apiserver.config import ApiServerConfig
    from nodeagent.commands.configs import dns_config
    from nodeagent.dns.service import DNSConfig
    from nodeagent.layout import Layout

    cfg = dns_config(ApiServerConfig(data_dir="/tmp/x", service_cluster_ip_range="10.100.0.0/16",
                                     advertise_address="192.0.2.5"),
                     Layout.for_data_dir("/tmp/x").admin_kubeconfig, listen="127.0.0.1:5353", ttl=5)
    assert cfg.kubeconfig == "/tmp/x/admin.kubeconfig" and cfg.listen == "127.0.0.1:5353" and cfg.ttl == 5
    assert not cfg.register_service and cfg.advertise_address == "192.0.2.5"
    from nodeagent.commands.configs import dns_addon

    addon = dns_addon(cfg)
    assert (addon.cluster_ip, addon.endpoint_ip, addon.port) == ("10.100.0.10", "192.0.2.5", 5353)
    assert cfg.service_cluster_ip_range == "10.100.0.0/16"
    from nodeagent.api.kube_dns import default_service_ip

    assert default_service_ip(cfg.service_cluster_ip_range) == "10.100.0.10"
    assert default_service_ip() == "10.96.0.10"
    assert DNSConfig("k", upstreams=["127.0.0.1:5300"]).upstream_addrs() == [("127.0.0.1", 5300)]


def test_upstreams_that_are_this_server_are_dropped():
    from nodeagent.dns.service import _is_self

    assert _is_self(("127.0.0.1", 53), ("0.0.0.0", 53)) and _is_self(("10.0.0.1", 5353), ("10.0.0.1", 5353))
    assert not _is_self(("127.0.0.53", 53), ("127.0.0.1", 53))
    assert not _is_self(("192.0.2.1", 53), ("0.0.0.0", 53))


async def test_externalname_without_an_upstream_answer_is_nodata():
    objs = objects()
    objs["services"].append(service("ext", "web", None, [], type="ExternalName", externalName="example.org"))

    async def down(qname, qtype, qclass):
        return None

    h = Handler(ClusterRecords(dict_lister(objs)), ScriptedForwarder(down))
    out = h.handle(query("ext.web.svc.cluster.local").to_wire(), True)
    assert inspect.isawaitable(out)
    wire = await out
    assert wire is not None
    r = dns.message.from_wire(wire)
    assert r.rcode() == dns.rcode.NOERROR and not r.answer and r.authority[0].rdtype == T.SOA


async def test_forwarder_shares_one_upstream_query_between_concurrent_askers():
    import asyncio

    calls = []
    gate = asyncio.Event()

    async def slow(qname, qtype, qclass):
        calls.append(qname)
        await gate.wait()
        r = dns.message.make_response(query(qname.to_text(), qtype))
        r.answer.append(dns.rrset.from_text(qname, 60, "IN", "A", "198.51.100.8"))
        return r

    fw = ScriptedForwarder(slow)
    name = dns.name.from_text("shared.example.org")
    tasks = [asyncio.create_task(fw.resolve(name, T.A)) for _ in range(5)]
    await asyncio.sleep(0)
    gate.set()
    out = await asyncio.gather(*tasks)
    assert len(calls) == 1 and all(r and r.answer[0][0].to_text() == "198.51.100.8" for r in out)

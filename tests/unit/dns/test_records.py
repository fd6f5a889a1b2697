"""Record resolution over in-memory objects: the CoreDNS kubernetes plugin's answers, no network."""

from __future__ import annotations

import dns.name
import dns.rcode
import dns.rdatatype as T
import dns.reversename
import pytest

from nodeagent.dns.records import ClusterRecords, dict_lister
from nodeagent.testing.dns_objects import endpoint_slice, ep, namespace, pod, service

NX, OK = dns.rcode.NXDOMAIN, dns.rcode.NOERROR


def world() -> dict[str, list]:
    return {
        "namespaces": [namespace("default"), namespace("kube-system"), namespace("web")],
        "services": [
            service("kubernetes", "default", "10.96.0.1",
                    [{"name": "https", "port": 443, "protocol": "TCP"}]),
            service("kube-dns", "kube-system", "10.96.0.10", [{"name": "dns", "port": 53, "protocol": "UDP"},
                                                              {"name": "dns-tcp", "port": 53,
                                                               "protocol": "TCP"}]),
            service("api", "web", "10.96.0.20", [{"name": "http", "port": 80, "protocol": "TCP"},
                                                 {"port": 9000, "protocol": "TCP"}]),
            service("db", "web", "None", [{"name": "pg", "port": 5432, "protocol": "TCP"}]),
            service("ext", "web", None, [], type="ExternalName", externalName="example.org"),
            service("alias", "web", None, [], type="ExternalName", externalName="api.web.svc.cluster.local"),
            service("v6", "web", "fd00::20", [{"name": "http", "port": 80, "protocol": "TCP"}]),
            service("bare", "web", "None", []),
        ],
        "endpointslices": [
            endpoint_slice("db", "web", [ep("10.244.1.1", hostname="db-0"), ep("10.244.1.2", hostname="db-1"),
                                         ep("10.244.1.3", ready=False, hostname="db-2"),
                                         ep("10.244.1.4", ready=None)],
                           [{"name": "pg", "port": 5432, "protocol": "TCP"}]),
            endpoint_slice("api", "web", [ep("10.244.2.1")],
                           [{"name": "http", "port": 8080, "protocol": "TCP"}]),
            endpoint_slice("bare", "web", [ep("10.244.3.1")], []),
        ],
        "endpoints": [],
        "pods": [pod("db-0", "web", "10.244.1.1", hostname="db-0", subdomain="db"),
                 pod("lonely", "web", "10.244.9.9"),
                 pod("hn", "web", "192.168.1.1", host_network=True)],
    }


def rec(objs=None, **kw) -> ClusterRecords:
    return ClusterRecords(dict_lister(objs or world()), **kw)


def ask(r: ClusterRecords, name: str, qtype: T.RdataType = T.A):
    ans = r.resolve(dns.name.from_text(name), qtype)
    return ans


def values(ans, rdtype: int | None = None) -> list[str]:
    return sorted(rd.to_text() for rrs in ans.answer for rd in rrs if rdtype is None or rrs.rdtype == rdtype)


def test_service_a_is_cluster_ip_with_ttl():
    a = ask(rec(), "api.web.svc.cluster.local")
    assert a.rcode == OK and values(a) == ["10.96.0.20"] and a.answer[0].ttl == 30
    assert values(ask(rec(ttl=7), "kubernetes.default.svc.cluster.local")) == ["10.96.0.1"]
    assert ask(rec(ttl=7), "kubernetes.default.svc.cluster.local").answer[0].ttl == 7


def test_names_are_case_insensitive():
    assert values(ask(rec(), "API.Web.SVC.Cluster.Local")) == ["10.96.0.20"]


def test_headless_answers_ready_endpoints_only():
    a = ask(rec(), "db.web.svc.cluster.local")
    # ready=None counts as ready; db-2 is not ready
    assert values(a) == ["10.244.1.1", "10.244.1.2", "10.244.1.4"]


def test_endpoint_hostname_and_dashed_ip_names():
    r = rec()
    assert values(ask(r, "db-1.db.web.svc.cluster.local")) == ["10.244.1.2"]
    assert values(ask(r, "10-244-1-4.db.web.svc.cluster.local")) == ["10.244.1.4"]
    assert ask(r, "db-2.db.web.svc.cluster.local").rcode == NX  # not ready
    # an endpoint name under a ClusterIP Service resolves to the endpoint, as CoreDNS does
    assert values(ask(r, "10-244-2-1.api.web.svc.cluster.local")) == ["10.244.2.1"]


def test_statefulset_pod_hostname_from_pod_spec_when_endpoints_lack_it():
    objs = world()
    objs["endpointslices"] = [endpoint_slice("db", "web", [ep("10.244.1.1")], [{"name": "pg", "port": 5432}])]
    objs["pods"].append(pod("db-5", "web", "10.244.1.5", hostname="db-5", subdomain="db"))
    objs["pods"].append(pod("db-6", "web", "10.244.1.6", hostname="db-6", subdomain="db", ready=False))
    r = rec(objs)
    assert values(ask(r, "db-0.db.web.svc.cluster.local")) == ["10.244.1.1"]
    assert values(ask(r, "db-5.db.web.svc.cluster.local")) == ["10.244.1.5"]
    assert ask(r, "db-6.db.web.svc.cluster.local").rcode == NX


def test_srv_named_port_clusterip_and_headless():
    r = rec()
    a = ask(r, "_http._tcp.api.web.svc.cluster.local", T.SRV)
    assert [rd.port for rrs in a.answer for rd in rrs] == [80]
    assert [rd.target.to_text() for rrs in a.answer for rd in rrs] == ["api.web.svc.cluster.local."]
    assert values(type("A", (), {"answer": a.additional})) == ["10.96.0.20"]
    h = ask(r, "_pg._tcp.db.web.svc.cluster.local", T.SRV)
    targets = sorted(rd.target.to_text() for rrs in h.answer for rd in rrs)
    assert targets == ["10-244-1-4.db.web.svc.cluster.local.", "db-0.db.web.svc.cluster.local.",
                       "db-1.db.web.svc.cluster.local."]
    assert {rd.port for rrs in h.answer for rd in rrs} == {5432}
    assert sorted(rd.to_text() for rrs in h.additional for rd in rrs) == [
        "10.244.1.1", "10.244.1.2", "10.244.1.4"]
    # the service name asked for SRV gives every port
    allp = ask(r, "api.web.svc.cluster.local", T.SRV)
    assert sorted(rd.port for rrs in allp.answer for rd in rrs) == [80, 9000]


def test_srv_unknown_port_or_protocol_is_nxdomain():
    r = rec()
    assert ask(r, "_nope._tcp.api.web.svc.cluster.local", T.SRV).rcode == NX
    assert ask(r, "_http._udp.api.web.svc.cluster.local", T.SRV).rcode == NX
    assert ask(r, "_http._tcp.api.web.svc.cluster.local", T.A).rcode == OK


def test_externalname_is_cname_and_chased():
    r = rec()
    a = ask(r, "ext.web.svc.cluster.local")
    assert values(a) == ["example.org."] and a.chase == dns.name.from_text("example.org")
    c = ask(r, "ext.web.svc.cluster.local", T.CNAME)
    assert values(c) == ["example.org."] and c.chase is None
    inner = ask(r, "alias.web.svc.cluster.local")  # a target inside the zone is answered here
    assert values(inner, T.CNAME) == ["api.web.svc.cluster.local."] and values(inner, T.A) == ["10.96.0.20"]
    assert ask(r, "ext.web.svc.cluster.local", T.SRV).rcode == OK and not ask(r, "ext.web.svc.cluster.local",
                                                                                T.SRV).answer


def test_nxdomain_vs_nodata():
    r = rec()
    nodata = ["cluster.local", "svc.cluster.local", "pod.cluster.local", "web.svc.cluster.local",
              "web.pod.cluster.local"]
    for name in nodata:
        a = ask(r, name)
        assert a.rcode == OK and not a.answer and a.authority[0].rdtype == T.SOA, name
    nx = ["nope.web.svc.cluster.local", "api.nons.svc.cluster.local", "nons.svc.cluster.local",
          "api.web.other.cluster.local", "a.b.c._http._tcp.api.web.svc.cluster.local", "x.cluster.local"]
    for name in nx:
        a = ask(r, name)
        assert a.rcode == NX and a.authority[0].rdtype == T.SOA, name
    # exists but no such type: NODATA, with the zone's SOA
    for name, qt in [("api.web.svc.cluster.local", T.AAAA), ("api.web.svc.cluster.local", T.MX),
                     ("v6.web.svc.cluster.local", T.A), ("api.web.svc.cluster.local", T.TXT)]:
        a = ask(r, name, qt)
        assert a.rcode == OK and not a.answer, (name, qt)
        assert a.authority[0].name.to_text() == "cluster.local.", (name, qt)
    assert values(ask(r, "v6.web.svc.cluster.local", T.AAAA)) == ["fd00::20"]
    assert ask(r, "nope.web.svc.cluster.local", T.MX).rcode == NX


def test_service_without_ports_still_has_addresses_but_no_srv():
    r = rec()
    assert values(ask(r, "bare.web.svc.cluster.local")) == ["10.244.3.1"]
    a = ask(r, "bare.web.svc.cluster.local", T.SRV)
    assert a.rcode == OK and not a.answer


def test_pod_records_by_mode():
    assert values(ask(rec(), "10-244-9-9.web.pod.cluster.local")) == ["10.244.9.9"]
    assert values(ask(rec(), "1-2-3-4.web.pod.cluster.local")) == ["1.2.3.4"]  # insecure: any address
    assert ask(rec(), "1-2-3-4.nons.pod.cluster.local").rcode == NX
    assert ask(rec(), "not-an-ip.web.pod.cluster.local").rcode == NX
    assert ask(rec(pods="verified"), "1-2-3-4.web.pod.cluster.local").rcode == NX
    assert values(ask(rec(pods="verified"), "10-244-9-9.web.pod.cluster.local")) == ["10.244.9.9"]
    assert ask(rec(pods="verified"), "10-244-9-9.default.pod.cluster.local").rcode == NX
    assert ask(rec(pods="disabled"), "10-244-9-9.web.pod.cluster.local").rcode == NX


def test_ptr_service_endpoint_pod_and_fallthrough():
    r = rec()
    assert values(ask(r, "20.0.96.10.in-addr.arpa", T.PTR)) == ["api.web.svc.cluster.local."]
    assert values(ask(r, "2.1.244.10.in-addr.arpa", T.PTR)) == ["db-1.db.web.svc.cluster.local."]
    assert values(ask(r, "4.1.244.10.in-addr.arpa", T.PTR)) == ["10-244-1-4.db.web.svc.cluster.local."]
    assert values(ask(r, "9.9.244.10.in-addr.arpa", T.PTR)) == ["10-244-9-9.web.pod.cluster.local."]
    assert ask(r, "1.1.168.192.in-addr.arpa", T.PTR).forward  # hostNetwork pod: the node's address
    assert ask(r, "8.8.8.8.in-addr.arpa", T.PTR).forward
    assert ask(r, "10.in-addr.arpa", T.PTR).forward
    v6 = dns.reversename.from_address("fd00::20")
    assert values(r.resolve(v6, T.PTR)) == ["v6.web.svc.cluster.local."]


def test_names_outside_the_zone_are_forwarded():
    assert ask(rec(), "example.org").forward
    assert ask(rec(), "cluster.local.example.org").forward
    assert not ask(rec(domain="k8s.test"), "api.web.svc.k8s.test").forward


def test_zone_apex_soa_ns_and_dns_version():
    r = rec()
    soa = ask(r, "cluster.local", T.SOA)
    assert soa.answer[0].rdtype == T.SOA and soa.answer[0][0].minimum == 30
    ns = ask(r, "cluster.local", T.NS)
    assert values(ns) == ["ns.dns.cluster.local."] and values(type("X", (), {"answer": ns.additional})) == [
        "10.96.0.10"]
    assert values(ask(r, "ns.dns.cluster.local")) == ["10.96.0.10"]
    assert values(ask(r, "dns-version.cluster.local", T.TXT)) == ['"1.1.0"']


def test_endpoints_v1_used_when_no_slices_exist():
    objs = world()
    objs["endpoints"] = [{"metadata": {"name": "db", "namespace": "web"},
                          "subsets": [{"addresses": [{"ip": "10.244.7.1", "hostname": "w-0"}],
                                       "notReadyAddresses": [{"ip": "10.244.7.2"}],
                                       "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]}]}]
    objs["endpointslices"] = []
    objs["pods"] = []
    r = rec(objs)
    assert values(ask(r, "db.web.svc.cluster.local")) == ["10.244.7.1"]
    assert values(ask(r, "w-0.db.web.svc.cluster.local")) == ["10.244.7.1"]


def test_changes_need_invalidate():
    objs = world()
    r = rec(objs)
    assert values(ask(r, "api.web.svc.cluster.local")) == ["10.96.0.20"]
    objs["services"][2]["spec"]["clusterIP"] = objs["services"][2]["spec"]["clusterIPs"][0] = "10.96.0.99"
    gen = r.generation
    r.invalidate()
    assert r.generation == gen + 1
    assert values(ask(r, "api.web.svc.cluster.local")) == ["10.96.0.99"]


def test_bad_pods_mode_rejected():
    with pytest.raises(ValueError):
        rec(pods="sometimes")


def test_changed_drops_no_op_updates_and_indexes_pods_incrementally():
    objs = world()
    r = rec(objs)
    assert values(ask(r, "9.9.244.10.in-addr.arpa", T.PTR)) == ["10-244-9-9.web.pod.cluster.local."]
    lonely = objs["pods"][1]
    touched = {**lonely,
               "status": {**lonely["status"], "containerStatuses": [{"name": "c", "restartCount": 1}]}}
    gen = r.generation
    assert not r.changed("pods", lonely, touched) and r.generation == gen  # nothing DNS reads
    assert not r.changed("namespaces", objs["namespaces"][0], objs["namespaces"][0])
    # a new StatefulSet-style pod: its hostname record and its PTR appear without a full rebuild
    new = pod("db-7", "web", "10.244.1.7", hostname="db-7", subdomain="db")
    objs["pods"].append(new)
    assert r.changed("pods", None, new) and r.generation == gen + 1
    assert values(ask(r, "db-7.db.web.svc.cluster.local")) == ["10.244.1.7"]
    assert values(ask(r, "7.1.244.10.in-addr.arpa", T.PTR)) == ["db-7.db.web.svc.cluster.local."]
    # it stops being ready: gone from the headless answers; deleted: its PTR falls through
    unready = pod("db-7", "web", "10.244.1.7", hostname="db-7", subdomain="db", ready=False)
    assert r.changed("pods", new, unready)
    assert ask(r, "db-7.db.web.svc.cluster.local").rcode == NX
    assert r.changed("pods", unready, None)
    assert ask(r, "7.1.244.10.in-addr.arpa", T.PTR).forward
    # a Service change rebuilds the Service part
    svc = objs["services"][2]
    moved = {**svc, "spec": {**svc["spec"], "clusterIP": "10.96.0.98", "clusterIPs": ["10.96.0.98"]}}
    objs["services"][2] = moved
    assert r.changed("services", svc, moved)
    assert values(ask(r, "api.web.svc.cluster.local")) == ["10.96.0.98"]
    # a slice update is seen; an identical one is not a change
    sl = objs["endpointslices"][0]
    grown = {**sl, "endpoints": [*sl["endpoints"], ep("10.244.1.9")]}
    objs["endpointslices"][0] = grown
    assert r.changed("endpointslices", sl, grown) and not r.changed("endpointslices", grown, dict(grown))
    assert "10.244.1.9" in values(ask(r, "db.web.svc.cluster.local"))


def test_externalname_loops_and_dangling_targets_inside_the_zone_are_nodata():
    objs = world()
    objs["services"] += [service("loop", "web", None, [], type="ExternalName",
                                 externalName="loop.web.svc.cluster.local"),
                         service("ping", "web", None, [], type="ExternalName",
                                 externalName="pong.web.svc.cluster.local"),
                         service("pong", "web", None, [], type="ExternalName",
                                 externalName="ping.web.svc.cluster.local"),
                         service("gone", "web", None, [], type="ExternalName",
                                 externalName="x.web.svc.cluster.local")]
    for name in ("loop", "ping", "gone"):
        a = ask(rec(objs), f"{name}.web.svc.cluster.local")
        assert a.rcode == OK and not a.answer and a.authority[0].rdtype == T.SOA, name
    assert values(ask(rec(objs), "loop.web.svc.cluster.local", T.CNAME)) == ["loop.web.svc.cluster.local."]


def test_servfail_instead_of_nxdomain_until_synced():
    r = rec()
    r.synced = False
    assert ask(r, "nope.web.svc.cluster.local").rcode == dns.rcode.SERVFAIL
    assert values(ask(r, "api.web.svc.cluster.local")) == ["10.96.0.20"]
    gen = r.generation
    r.set_synced()
    assert r.generation > gen and ask(r, "nope.web.svc.cluster.local").rcode == NX

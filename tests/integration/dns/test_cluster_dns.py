"""`nodeagent dns` against a real `nodeagent server`, queried over real UDP/TCP sockets with dnspython.

No root: everything listens on 127.0.0.1. The endpoint controller is not part of these tests, so
EndpointSlices are written as that controller would write them.
"""

from __future__ import annotations

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype as T
import dns.resolver
import dns.reversename
import pytest

from nodeagent.kubelet.resolvconf import pod_resolv_conf
from nodeagent.testing.dns_objects import endpoint_slice, ep, namespace, service

from .conftest import UPSTREAM_ANSWERS, eventually

pytestmark = pytest.mark.e2e
NS = "dnstest"


def ask(dnsd, name: str, qtype: T.RdataType = T.A, tcp: bool = False, **kw) -> dns.message.Message:
    q = dns.message.make_query(name, qtype, **kw)
    if tcp:
        return dns.query.tcp(q, "127.0.0.1", port=dnsd.port, timeout=5)
    return dns.query.udp(q, "127.0.0.1", port=dnsd.port, timeout=5)


def addrs(r: dns.message.Message, rdtype: int = T.A) -> list[str]:
    return sorted(rd.to_text() for rrs in r.answer if rrs.rdtype == rdtype for rd in rrs)


@pytest.fixture(scope="module")
def objects(api, dnsd):
    """The namespace, a ClusterIP Service, a headless StatefulSet-style Service with its slice,
    an ExternalName."""
    async def make(c):
        await c.create("namespaces", namespace(NS))
        web = await c.create("services", service("web", NS, None, [{"name": "http", "port": 80,
                                                                         "protocol": "TCP"}]), NS)
        await c.create("services", service("db", NS, "None", [{"name": "pg", "port": 5432,
                                                                    "protocol": "TCP"}]), NS)
        db = [ep("10.244.5.10", hostname="db-0"), ep("10.244.5.11", hostname="db-1"),
              ep("10.244.5.12", ready=False, hostname="db-2")]
        pg = [{"name": "pg", "port": 5432, "protocol": "TCP"}]
        await c.create("endpointslices", endpoint_slice("db", NS, db, pg), NS)
        await c.create("services", service("ext", NS, None, [], type="ExternalName",
                                                externalName="www.example.test"), NS)
        k8s = await c.get("services", "kubernetes", "default")
        return {"web": web["spec"]["clusterIP"], "kubernetes": k8s["spec"]["clusterIP"]}

    ips = api(make)
    # the informers see them: wait until the last one answers
    assert eventually(lambda: ask(dnsd, f"ext.{NS}.svc.cluster.local", T.CNAME).answer)
    return ips


def test_service_a_record_is_its_cluster_ip(dnsd, objects):
    r = ask(dnsd, f"web.{NS}.svc.cluster.local")
    assert r.rcode() == dns.rcode.NOERROR and r.flags & dns.flags.AA
    assert addrs(r) == [objects["web"]] and r.answer[0].ttl == 30


def test_kubernetes_default_through_pod_search_path(dnsd, objects, tmp_path):
    """The seed's `nslookup kubernetes.default`: a ClusterFirst pod's resolv.conf, used as is."""
    pod = {"metadata": {"name": "debug", "namespace": "default"}, "spec": {"dnsPolicy": "ClusterFirst"}}
    rc = pod_resolv_conf(pod, ["127.0.0.1"], "cluster.local", "nameserver 192.0.2.1\nsearch lab.example\n")
    path = tmp_path / "resolv.conf"
    path.write_text(rc.render())
    res = dns.resolver.Resolver(filename=str(path))
    res.port = dnsd.port
    assert res.ndots == 5
    ans = res.resolve("kubernetes.default", "A", search=True)
    assert ans.qname.to_text() == "kubernetes.default.svc.cluster.local."
    assert [rd.to_text() for rd in ans] == [objects["kubernetes"]]


def test_headless_service_answers_ready_endpoints(dnsd, objects):
    assert addrs(ask(dnsd, f"db.{NS}.svc.cluster.local")) == ["10.244.5.10", "10.244.5.11"]


def test_statefulset_hostname_records_and_srv(dnsd, objects):
    assert addrs(ask(dnsd, f"db-1.db.{NS}.svc.cluster.local")) == ["10.244.5.11"]
    assert ask(dnsd, f"db-2.db.{NS}.svc.cluster.local").rcode() == dns.rcode.NXDOMAIN
    r = ask(dnsd, f"_pg._tcp.db.{NS}.svc.cluster.local", T.SRV)
    assert sorted((rd.port, rd.target.to_text()) for rd in r.answer[0]) == [
        (5432, f"db-0.db.{NS}.svc.cluster.local."), (5432, f"db-1.db.{NS}.svc.cluster.local.")]
    assert sorted(rd.to_text() for rrs in r.additional if rrs.rdtype == T.A for rd in rrs) == [
        "10.244.5.10", "10.244.5.11"]
    s = ask(dnsd, f"_http._tcp.web.{NS}.svc.cluster.local", T.SRV)
    assert [(rd.port, rd.target.to_text()) for rd in s.answer[0]] == [(80, f"web.{NS}.svc.cluster.local.")]


def test_ptr_for_service_and_endpoint(dnsd, objects):
    r = ask(dnsd, dns.reversename.from_address(objects["kubernetes"]).to_text(), T.PTR)
    assert addrs(r, T.PTR) == ["kubernetes.default.svc.cluster.local."]
    e = ask(dnsd, dns.reversename.from_address("10.244.5.11").to_text(), T.PTR)
    assert addrs(e, T.PTR) == [f"db-1.db.{NS}.svc.cluster.local."]


def test_externalname_cname_chased_upstream(dnsd, objects):
    r = ask(dnsd, f"ext.{NS}.svc.cluster.local")
    assert [rrs.rdtype for rrs in r.answer] == [T.CNAME, T.A]
    assert addrs(r, T.CNAME) == ["www.example.test."] and addrs(r) == [UPSTREAM_ANSWERS["www.example.test."]]


def test_nxdomain_vs_nodata(dnsd, objects):
    for name, qtype in [(f"nope.{NS}.svc.cluster.local", T.A), ("nons.svc.cluster.local", T.A),
                        (f"web.{NS}.other.cluster.local", T.A)]:
        r = ask(dnsd, name, qtype)
        assert r.rcode() == dns.rcode.NXDOMAIN and r.authority[0].rdtype == T.SOA, name
    for name, qtype in [(f"web.{NS}.svc.cluster.local", T.AAAA), (f"{NS}.svc.cluster.local", T.A),
                        ("svc.cluster.local", T.A), (f"web.{NS}.svc.cluster.local", T.MX)]:
        r = ask(dnsd, name, qtype)
        assert r.rcode() == dns.rcode.NOERROR and not r.answer and r.authority[0].rdtype == T.SOA, name


def test_truncation_and_tcp_fallback_with_many_endpoints(api, dnsd, objects):
    n = 120
    async def make(c):
        await c.create("services", service("many", NS, "None", [{"name": "http", "port": 80}]), NS)
        many = [ep(f"10.244.6.{i + 1}") for i in range(n)]
        http = [{"name": "http", "port": 80, "protocol": "TCP"}]
        await c.create("endpointslices", endpoint_slice("many", NS, many, http), NS)
    api(make)
    name = f"many.{NS}.svc.cluster.local"
    assert eventually(lambda: ask(dnsd, name, tcp=True).answer)
    udp = ask(dnsd, name, use_edns=False)
    assert udp.flags & dns.flags.TC and not udp.answer
    query = dns.message.make_query(name, T.A, use_edns=False)
    full, used_tcp = dns.query.udp_with_fallback(query, "127.0.0.1", port=dnsd.port, timeout=5)
    assert used_tcp and len(addrs(full)) == n and not full.flags & dns.flags.TC


def test_changes_are_seen_promptly(api, dnsd, objects):
    async def grow(c):
        s = await c.get("endpointslices", "db-abcde", NS)
        s["endpoints"].append(ep("10.244.5.20", hostname="db-3"))
        await c.update("endpointslices", s, NS)
    api(grow)
    assert eventually(lambda: "10.244.5.20" in addrs(ask(dnsd, f"db.{NS}.svc.cluster.local")))
    assert addrs(ask(dnsd, f"db-3.db.{NS}.svc.cluster.local")) == ["10.244.5.20"]

    async def make_and_drop(c):
        await c.create("services", service("brief", NS, None), NS)
    api(make_and_drop)
    assert eventually(lambda: ask(dnsd, f"brief.{NS}.svc.cluster.local").answer)
    api(lambda c: c.delete("services", "brief", NS))
    assert eventually(lambda: ask(dnsd, f"brief.{NS}.svc.cluster.local").rcode() == dns.rcode.NXDOMAIN)


def test_forwarding_to_upstream_with_cache(dnsd, upstream):
    name = "api.example.test."
    before = upstream.count(name)
    first = ask(dnsd, name)
    assert addrs(first) == [UPSTREAM_ANSWERS[name]] and not first.flags & dns.flags.AA
    second = ask(dnsd, name, tcp=True)
    assert addrs(second) == [UPSTREAM_ANSWERS[name]] and second.answer[0].ttl <= first.answer[0].ttl <= 60
    assert upstream.count(name) == before + 1  # the second came from the cache
    nx = ask(dnsd, "missing.example.test.")
    assert nx.rcode() == dns.rcode.NXDOMAIN and nx.authority[0].rdtype == T.SOA
    ask(dnsd, "missing.example.test.")
    assert upstream.count("missing.example.test.") == 1  # negative answers cached by the SOA's TTL


def test_reverse_lookup_outside_the_cluster_falls_through_to_upstream(dnsd, upstream):
    name = dns.reversename.from_address("198.51.100.99").to_text()
    r = ask(dnsd, name, T.PTR)
    assert r.rcode() == dns.rcode.NXDOMAIN and upstream.count(name) == 1


async def set_status(c, name, status):
    """Replace a pod's status, retrying on 409: the server's scheduler also writes pod status."""
    from nodeagent.client.rest import ClientError

    for _ in range(20):
        p = await c.get("pods", name, NS)
        p["status"] = status
        try:
            return await c.update_status("pods", p)
        except ClientError as e:
            if not e.conflict:
                raise
    raise AssertionError(f"pod {name}: status kept conflicting")


def test_statefulset_pods_hostname_records_from_pod_specs(api, dnsd, objects):
    """Pods with hostname + subdomain of a headless Service get `<hostname>.<svc>.<ns>.svc` once Ready."""
    async def make(c):
        await c.create("services", service("sts", NS, "None", [{"name": "web", "port": 80}]), NS)
        for i in range(2):
            await c.create("pods", {"apiVersion": "v1", "kind": "Pod",
                                   "metadata": {"name": f"sts-{i}", "namespace": NS},
                                   "spec": {"hostname": f"sts-{i}", "subdomain": "sts",
                                            "containers": [{"name": "c", "image": "busybox"}]}}, NS)
            status = {"phase": "Running", "podIP": f"10.244.8.{i + 1}",
                      "podIPs": [{"ip": f"10.244.8.{i + 1}"}],
                      "conditions": [{"type": "Ready", "status": "True" if i == 0 else "False"}]}
            await set_status(c, f"sts-{i}", status)
    api(make)
    name = f"sts-0.sts.{NS}.svc.cluster.local"
    assert eventually(lambda: addrs(ask(dnsd, name)) == ["10.244.8.1"])
    assert ask(dnsd, f"sts-1.sts.{NS}.svc.cluster.local").rcode() == dns.rcode.NXDOMAIN  # not Ready
    reverse = dns.reversename.from_address("10.244.8.1").to_text()
    assert addrs(ask(dnsd, reverse, T.PTR), T.PTR) == [name + "."]

    async def ready(c):
        p = await c.get("pods", "sts-1", NS)
        await set_status(c, "sts-1", {**p["status"], "conditions": [{"type": "Ready", "status": "True"}]})
    api(ready)
    assert eventually(lambda: addrs(ask(dnsd, f"sts.{NS}.svc.cluster.local")) == ["10.244.8.1", "10.244.8.2"])


def test_cli_reports_an_address_in_use(server):
    import socket
    import subprocess
    import sys

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as blocker:
        blocker.bind(("127.0.0.1", 0))
        port = blocker.getsockname()[1]
        p = subprocess.run([sys.executable, "-m", "nodeagent", "dns", "--kubeconfig", str(server.kubeconfig),
                            "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and f"cannot serve on 127.0.0.1:{port}" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr

"""`serve(config, ready)` as a `nodeagent server` component: the server's config (data_dir, Service
range), the kube-dns Service registered at the range's 10th address and pointing at this server."""

from __future__ import annotations

import asyncio
import socket

import dns.asyncquery
import dns.message
import dns.rcode
import pytest

from nodeagent.apiserver.config import ApiServerConfig
from nodeagent.client.rest import Client
from nodeagent.commands.configs import dns_config
from nodeagent.dns.service import serve
from nodeagent.layout import Layout

pytestmark = pytest.mark.e2e


async def test_component_registers_kube_dns_and_answers(server, upstream, monkeypatch):
    import nodeagent.dns.service as service

    monkeypatch.setattr(service, "REPAIR_INTERVAL", 0.2)
    api = ApiServerConfig(data_dir=str(server.data_dir), service_cluster_ip_range="10.96.0.0/12",
                          advertise_address=None)
    config = dns_config(api, Layout.for_data_dir(server.data_dir).admin_kubeconfig, listen="127.0.0.1:0",
                        upstreams=[f"127.0.0.1:{upstream.port}"], register_service=True)
    ready = asyncio.Event()
    task = asyncio.create_task(serve(config, ready))
    try:
        await asyncio.wait_for(ready.wait(), 30)
        async with Client(server.url, server.token, ca_file=str(server.ca_file)) as c:
            svc = await c.get("services", "kube-dns", "kube-system")
            sl = await c.get("endpointslices.discovery.k8s.io", "kube-dns-nodeagent-dns", "kube-system")
        assert svc["spec"]["clusterIP"] == "10.96.0.10"
        assert sl["endpoints"][0]["addresses"] == ["127.0.0.1"]
        port = sl["ports"][0]["port"]
        assert {p["protocol"] for p in sl["ports"]} == {"UDP", "TCP"}

        async def a(name: str) -> dns.message.Message:
            return await dns.asyncquery.udp(dns.message.make_query(name, "A"), "127.0.0.1",
                                            port=port, timeout=5)

        async def kube_dns_answered() -> list[str]:
            for _ in range(200):
                r = await a("kube-dns.kube-system.svc.cluster.local")
                if r.answer:
                    return [rd.to_text() for rd in r.answer[0]]
                await asyncio.sleep(0.05)
            return []

        assert await kube_dns_answered() == ["10.96.0.10"]
        assert [rd.to_text() for rd in (await a("ns.dns.cluster.local")).answer[0]] == ["10.96.0.10"]
        assert (await a("www.example.test")).answer[0][0].to_text() == "203.0.113.10"
        assert (await a("nope.default.svc.cluster.local")).rcode() == dns.rcode.NXDOMAIN
        async with Client(server.url, server.token, ca_file=str(server.ca_file)) as c:  # deleted: repaired
            await c.delete("endpointslices.discovery.k8s.io", "kube-dns-nodeagent-dns", "kube-system")
            for _ in range(100):
                await asyncio.sleep(0.1)
                items = (await c.list("endpointslices.discovery.k8s.io", "kube-system"))["items"]
                if any(i["metadata"]["name"] == "kube-dns-nodeagent-dns" for i in items):
                    break
            else:
                pytest.fail("the kube-dns EndpointSlice was not recreated")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    # stopped: the port is free again (listeners closed)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", port))
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


async def test_serves_before_the_api_answers(upstream, monkeypatch):
    """An apiserver that is not there: after the sync wait the server answers anyway, SERVFAIL for
    cluster names it cannot deny yet, forwarded names as usual (CoreDNS's behaviour)."""
    import nodeagent.dns.service as service

    monkeypatch.setattr(service, "SYNC_WAIT", 0.3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # nothing listens once closed
    cfg = service.DNSConfig(kubeconfig="-", listen="127.0.0.1:0", upstreams=[f"127.0.0.1:{upstream.port}"])
    ready = asyncio.Event()
    bound: list[tuple[str, int]] = []
    async with Client(f"https://127.0.0.1:{dead}", "t", insecure=True) as c:
        task = asyncio.create_task(service.run_dns(cfg, c, ready, bound))
        try:
            await asyncio.wait_for(ready.wait(), 10)
            port = bound[0][1]
            q = dns.message.make_query("nope.default.svc.cluster.local", "A")
            r = await dns.asyncquery.udp(q, "127.0.0.1", port=port, timeout=5)
            assert r.rcode() == dns.rcode.SERVFAIL
            r = await dns.asyncquery.udp(dns.message.make_query("www.example.test", "A"),
                                         "127.0.0.1", port=port,
                                         timeout=5)
            assert r.answer[0][0].to_text() == "203.0.113.10"
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_component_retries_an_address_in_use(server, upstream, monkeypatch):
    """As a server component, a taken port is retried (the control plane keeps running)."""
    import nodeagent.dns.service as service

    monkeypatch.setattr(service, "BIND_RETRY", 0.2)
    blocker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    blocker.bind(("127.0.0.1", 0))
    port = blocker.getsockname()[1]
    config = dns_config(ApiServerConfig(data_dir=str(server.data_dir)),
                        Layout.for_data_dir(server.data_dir).admin_kubeconfig, listen=f"127.0.0.1:{port}",
                        upstreams=[f"127.0.0.1:{upstream.port}"], register_service=False)
    ready = asyncio.Event()
    task = asyncio.create_task(serve(config, ready))
    try:
        await asyncio.sleep(1.0)
        assert not ready.is_set() and not task.done()  # still trying, not crashed
        blocker.close()
        await asyncio.wait_for(ready.wait(), 20)
        r = await dns.asyncquery.udp(dns.message.make_query("kubernetes.default.svc.cluster.local", "A"),
                                     "127.0.0.1", port=port, timeout=5)
        assert r.answer
    finally:
        blocker.close()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

"""The upgrade relay is protocol-agnostic (bytes both ways, the runtime's 101 passed through), and the
request → authorization attributes mapping follows the kubelet's."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from nodeagent.kubelet.server.auth import Authenticator, attributes, cert_subject
from nodeagent.kubelet.server.relay import relay


async def _fake_runtime(seen: list[bytes]) -> tuple[asyncio.AbstractServer, int]:
    """Answers any upgrade with its own 101 and then echoes bytes reversed: no websocket, no SPDY."""
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        head = await r.readuntil(b"\r\n\r\n")
        seen.append(head)
        w.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: any\r\nConnection: Upgrade\r\n"
                b"X-Runtime: yes\r\n\r\n")
        while data := await r.read(65536):
            w.write(data[::-1])
            await w.drain()
        w.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    return srv, srv.sockets[0].getsockname()[1]


@pytest.mark.parametrize("upgrade,early", [("SPDY/3.1", b""), ("websocket", b"early")])
def test_relay_passes_the_upgrade_and_bytes_both_ways(upgrade, early):
    """SPDY clients wait for the 101 before sending frames;
    websocket bytes right behind the head are kept too."""
    async def go() -> None:
        seen: list[bytes] = []
        srv, port = await _fake_runtime(seen)

        async def handler(request: web.Request) -> web.StreamResponse:
            return await relay(request, f"http://127.0.0.1:{port}/exec/tok123?x=1")

        app = web.Application()
        app.router.add_route("POST", "/exec/{rest:.*}", handler)
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        kport = runner.addresses[0][1]
        r, w = await asyncio.open_connection("127.0.0.1", kport)
        w.write(b"POST /exec/ns/pod/c?command=ls HTTP/1.1\r\nHost: k\r\nConnection: Upgrade\r\n"
                b"Upgrade: " + upgrade.encode() + b"\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
                b"Authorization: Bearer secret\r\n\r\n" + early)
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 101 ") and b"X-Runtime: yes" in head
        if early:
            assert await asyncio.wait_for(r.readexactly(len(early)), 10) == early[::-1]
        big = bytes(range(256)) * 4096  # 1 MiB: flow control on both legs
        w.write(big)
        got = await asyncio.wait_for(r.readexactly(len(big)), 20)
        assert len(got) == len(big)
        w.close()
        sent = seen[0].decode()
        assert sent.startswith("POST /exec/tok123?x=1 HTTP/1.1\r\n")
        assert f"Upgrade: {upgrade}" in sent and "X-Stream-Protocol-Version: v4.channel.k8s.io" in sent
        assert "Authorization" not in sent and "Host: 127.0.0.1:" in sent
        await runner.cleanup()
        srv.close()
        await srv.wait_closed()

    asyncio.run(asyncio.wait_for(go(), 30))


def test_authorization_attributes_follow_the_kubelet():
    assert attributes("GET", "/stats/summary", "n1") == {"verb": "get", "resource": "nodes",
                                                         "subresource": "stats", "name": "n1"}
    assert attributes("GET", "/metrics", "n1")["subresource"] == "metrics"
    assert attributes("POST", "/exec/ns/p/c", "n1") == {"verb": "create", "resource": "nodes",
                                                        "subresource": "proxy", "name": "n1"}
    assert attributes("GET", "/containerLogs/ns/p/c", "n1")["subresource"] == "proxy"
    assert attributes("GET", "/statsx", "n1")["subresource"] == "proxy"


def test_cert_subjects_and_anonymous():
    peer = {"subject": ((("organizationName", "system:masters"),),
                        (("commonName", "kube-apiserver-kubelet-client"),))}
    assert cert_subject(peer) == ("kube-apiserver-kubelet-client", ("system:masters",))
    assert cert_subject(None) is None
    a = Authenticator("n1", "https://127.0.0.1:1", None)

    async def go() -> None:
        assert (await a.check("GET", "/pods", None, None)).status == 401
        assert (await a.check("GET", "/pods", "Basic eDp5", None)).status == 401
        assert (await a.check("GET", "/pods", None, peer)).status == 200
        node_peer = {"subject": ((("organizationName", "system:nodes"),), (("commonName", "system:node:x"),))}
        assert (await a.check("GET", "/pods", None, node_peer)).status == 403
        # the apiserver cannot be reached: no decision is cached and the answer is not "allowed"
        assert (await a.check("GET", "/pods", "Bearer t", None)).status == 503
        await a.close()

    asyncio.run(go())

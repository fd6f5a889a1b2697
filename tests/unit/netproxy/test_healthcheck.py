"""kube-proxy's service health check: local ready endpoints of Local-policy LoadBalancer Services, served
on their healthCheckNodePort with kube-proxy's body and codes."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import aiohttp

from netproxy.healthcheck import ServiceHealthServer, body
from netproxy.model import parse_endpoint_slice, parse_service
from netproxy.tracker import ProxyState


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def state(port: int, eps: list[tuple[str, str, bool]]) -> ProxyState:
    svc: dict[str, Any] = {"metadata": {"name": "web", "namespace": "ns"},
                           "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.9",
                                    "externalTrafficPolicy": "Local", "healthCheckNodePort": port,
                                    "ports": [{"port": 80, "nodePort": 30080}]}}
    sl = {"metadata": {"labels": {"kubernetes.io/service-name": "web"}}, "ports": [{"port": 8080}],
          "endpoints": [{"addresses": [ip], "nodeName": node, "conditions": {"ready": ready}}
                        for ip, node, ready in eps]}
    st = ProxyState()
    for spn, sp in parse_service(svc).items():
        st.services[spn] = sp
        st.endpoints[spn] = parse_endpoint_slice(sl)[("", "TCP")]
    return st


def test_body_is_kube_proxys() -> None:
    assert json.loads(body(("ns", "web"), 2)) == {"service": {"namespace": "ns", "name": "web"},
                                                   "localEndpoints": 2, "serviceProxyHealthy": True}
    assert body(("a", "b"), 0).startswith('{\n\t"service": {\n\t\t"namespace": "a",')


async def test_counts_local_ready_endpoints_200_or_503() -> None:
    port = free_port()
    healthy = [True]
    hs = ServiceHealthServer("n1", ["127.0.0.1"], lambda: healthy[0])
    task = asyncio.create_task(hs.run())
    try:
        hs.update(state(port, [("10.0.0.1", "n1", True), ("10.0.0.2", "n1", False),
                               ("10.0.0.3", "n2", True)]))
        async with aiohttp.ClientSession() as http:
            for _ in range(200):  # readiness, not a timing bound: a loaded host may be slow
                try:
                    async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                        code, got = r.status, json.loads(await r.text())
                        assert r.headers["Content-Type"].startswith("application/json")
                    break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
            assert code == 200 and got["localEndpoints"] == 1 and got["service"] == {"namespace": "ns",
                                                                                      "name": "web"}
            healthy[0] = False  # a failing proxy: 503 whatever the count, and it says so
            async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                got = json.loads(await r.text())
                assert r.status == 503 and got["localEndpoints"] == 1 and got["serviceProxyHealthy"] is False
            healthy[0] = True
            hs.update(state(port, [("10.0.0.3", "n2", True)]))
            async with http.get(f"http://127.0.0.1:{port}/") as r:
                assert r.status == 503 and json.loads(await r.text())["localEndpoints"] == 0
            hs.update(ProxyState())  # the Service is gone: its port closes
            for _ in range(200):  # readiness, not a timing bound: a loaded host may be slow
                await asyncio.sleep(0.05)
                if not hs._open:
                    break
            try:
                async with http.get(f"http://127.0.0.1:{port}/"):
                    raise AssertionError("the port is still open")
            except aiohttp.ClientConnectionError:
                pass
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

"""`nodeagent ingress` with a real HAProxy and real traffic: host and path routing spread over the ready
endpoints, TLS with SNI and the default certificate, the 308 redirect, HTTP/2, a missing Service
answering 503 for its rule only (with an event), the Ingress's status, endpoint changes without failed
requests, and no proxy left behind when the component is killed."""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from nodeagent.pki import self_signed
from nodeagent.testing.apiserver import ServerProcess
from tests.integration.ingress.conftest import Backend, IngressProcess, eventually, free_port, start_ingress

pytestmark = pytest.mark.e2e


def curl(*args: str) -> tuple[int, str, str]:
    """(status, body, effective HTTP version) of one request with curl."""
    p = subprocess.run(["curl", "-sS", "-k", "--max-time", "5", "-o", "-",
                        "-w", "\n%{http_code} %{http_version}", *args],
                       capture_output=True, text=True, check=False)
    body, _, tail = p.stdout.rpartition("\n")
    code, _, version = tail.partition(" ")
    return int(code or 0), body, version


def slice_for(svc: str, port: int, addresses: list[str], name: str = "") -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": name or f"{svc}-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": svc}},
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses]}


@pytest.fixture(scope="module")
def ingress(server: ServerProcess, api: Callable[..., Any], backends: tuple[int, list[Backend]],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[IngressProcess]:
    port, _ = backends
    crt, key = self_signed("a.test", ("a.test",))
    objs: list[tuple[str, dict[str, Any]]] = [
        ("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ing-node"},
                   "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}}),
        ("services", {"apiVersion": "v1", "kind": "Service",
                      "metadata": {"name": "web", "namespace": "default"},
                      "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}),
        ("endpointslices.discovery.k8s.io", slice_for("web", port, ["127.0.0.2", "127.0.0.3"])),
        ("secrets", {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                     "metadata": {"name": "a-tls", "namespace": "default"},
                     "data": {"tls.crt": base64.b64encode(crt).decode(),
                              "tls.key": base64.b64encode(key).decode()}}),
        ("ingresses.networking.k8s.io", {
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "a", "namespace": "default"},
            "spec": {"tls": [{"hosts": ["a.test"], "secretName": "a-tls"}],
                     "rules": [
                         {"host": "a.test", "http": {"paths": [
                             {"path": "/", "pathType": "Prefix",
                              "backend": {"service": {"name": "web", "port": {"name": "http"}}}},
                             {"path": "/missing", "pathType": "Prefix",
                              "backend": {"service": {"name": "nope", "port": {"number": 80}}}}]}},
                         {"host": "*.plain.test", "http": {"paths": [
                             {"path": "/app", "pathType": "Prefix",
                              "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}}),
    ]
    for resource, obj in objs:
        api(lambda c, r=resource, o=obj: c.create(r, o, o["metadata"].get("namespace")))
    api(lambda c: c.patch("nodes", "ing-node", {"status": objs[0][1]["status"]}, subresource="status"))
    ing = start_ingress(server, tmp_path_factory.mktemp("ing"))
    # the Ingress names no class: it is ours once the leader has made IngressClass nodeagent the default
    url = f"http://127.0.0.1:{ing.http}/app"
    assert eventually(lambda: curl("-H", "Host: b.plain.test", url)[0] == 200), ing.log()
    yield ing
    ing.proc.terminate()
    ing.proc.wait(timeout=30)


def test_the_default_ingress_class_is_created(ingress: IngressProcess, api: Callable[..., Any]) -> None:
    ic = api(lambda c: c.get("ingressclasses.networking.k8s.io", "nodeagent"))
    assert ic["metadata"]["annotations"]["ingressclass.kubernetes.io/is-default-class"] == "true"
    assert ic["spec"]["controller"] == "nodeagent.io/ingress-controller"


def test_hosts_and_paths_reach_every_ready_endpoint(ingress: IngressProcess) -> None:
    url = f"http://127.0.0.1:{ingress.http}/app/x"
    seen: Counter[str] = Counter()
    for _ in range(12):
        code, body, _ = curl("-H", "Host: b.plain.test", url)
        assert code == 200, body
        name, host, path, proto = body.split()
        assert (host, path, proto) == ("b.plain.test", "/app/x", "http")
        seen[name] += 1
    assert set(seen) == {"pod2", "pod3"}
    assert curl("-H", "Host: b.plain.test", f"http://127.0.0.1:{ingress.http}/apple")[0] == 404
    assert curl("-H", "Host: x.y.plain.test", url)[0] == 404  # *. is one label deep
    assert curl("-H", "Host: other.test", url)[:2] == (404, "default backend - 404")


def test_tls_sni_redirect_and_http2(ingress: IngressProcess) -> None:
    code, _, _ = curl("-H", "Host: a.test", f"http://127.0.0.1:{ingress.http}/p?q=1")
    assert code == 308
    loc = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{redirect_url}", "-H", "Host: a.test",
                          f"http://127.0.0.1:{ingress.http}/p?q=1"], capture_output=True, text=True).stdout
    assert loc == f"https://a.test:{ingress.https}/p?q=1"
    resolve = f"a.test:{ingress.https}:127.0.0.1"
    code, body, version = curl("--http2", "--resolve", resolve, f"https://a.test:{ingress.https}/s")
    assert (code, version) == (200, "2")
    assert body.split()[1:] == [f"a.test:{ingress.https}", "/s", "https"]
    assert served_cn(ingress.https, "a.test") == "a.test"
    assert served_cn(ingress.https, "unknown.test") == "nodeagent ingress default certificate"


def served_cn(port: int, sni: str) -> str:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), 5) as s, ctx.wrap_socket(s, server_hostname=sni) as t:
        der = t.getpeercert(binary_form=True)
    assert der is not None
    cert = x509.load_der_x509_certificate(der)
    return str(cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)[0].value)


def test_a_missing_service_fails_its_rule_only_with_an_event(ingress: IngressProcess,
                                                             api: Callable[..., Any]) -> None:
    resolve = f"a.test:{ingress.https}:127.0.0.1"
    assert curl("--resolve", resolve, f"https://a.test:{ingress.https}/missing")[0] == 503
    assert curl("--resolve", resolve, f"https://a.test:{ingress.https}/fine")[0] == 200

    def event() -> list[dict[str, Any]]:
        evs = api(lambda c: c.list("events", "default"))["items"]
        return [e for e in evs if e["involvedObject"]["name"] == "a" and e["reason"] == "BackendNotFound"]

    evs = eventually(event)
    assert evs and 'service "default/nope" not found' in evs[0]["message"]
    assert evs[0]["type"] == "Warning" and evs[0]["involvedObject"]["kind"] == "Ingress"


def test_status_names_the_node_addresses(ingress: IngressProcess, api: Callable[..., Any]) -> None:
    def lb() -> Any:
        ing = api(lambda c: c.get("ingresses.networking.k8s.io", "a", "default"))
        return (ing.get("status") or {}).get("loadBalancer", {}).get("ingress")

    assert eventually(lb) == [{"ip": "127.0.0.1"}]


def test_endpoint_changes_apply_within_a_second_without_failed_requests(
        ingress: IngressProcess, api: Callable[..., Any], backends: tuple[int, list[Backend]]) -> None:
    port, _ = backends
    url = f"http://127.0.0.1:{ingress.http}/app"
    sets = [["127.0.0.3"], ["127.0.0.2", "127.0.0.4"], ["127.0.0.4"], ["127.0.0.2", "127.0.0.3"]]
    failed = 0
    for addresses in sets:
        sl = api(lambda c: c.get("endpointslices.discovery.k8s.io", "web-1", "default"))
        sl["endpoints"] = [{"addresses": [a], "conditions": {"ready": True}} for a in addresses]
        api(lambda c, s=sl: c.update("endpointslices.discovery.k8s.io", s))
        changed = time.monotonic()
        want = {f"pod{a.rsplit('.', 1)[1]}" for a in addresses}
        streak: list[str] = []
        # a bounded request loop: until 8 answers in a row come from the new set (or 10 s)
        while time.monotonic() - changed < 10 and not (len(streak) >= 8 and set(streak[-8:]) <= want):
            code, body, _ = curl("-H", "Host: b.plain.test", url)
            if code != 200:
                failed += 1
                continue
            streak.append(body.split()[0])
        assert set(streak[-8:]) <= want, (addresses, streak)
        assert time.monotonic() - changed < 10
    assert failed == 0
    assert "reloaded" not in ingress.log().split("routes to")[-1]  # the last changes went by the runtime API


def test_prometheus_metrics(ingress: IngressProcess) -> None:
    code, body, _ = curl(f"http://127.0.0.1:{ingress.metrics}/metrics")
    assert code == 200
    assert 'haproxy_frontend_http_requests_total{proxy="nodeagent_ingress"}' in body
    assert 'haproxy_backend_http_responses_total{proxy="nodeagent_default_404",code="4xx"}' in body


def test_killing_the_component_leaves_no_proxy(server: ServerProcess, tmp_path: Path) -> None:
    ing = start_ingress(server, tmp_path / "k", "--no-manage")
    pids = eventually(ing.haproxy_pids)
    assert pids, ing.log()
    ing.proc.kill()
    ing.proc.wait()
    assert eventually(lambda: not ing.haproxy_pids(), timeout=10), ing.haproxy_pids()


async def test_websocket_passes_through(ingress: IngressProcess, server: ServerProcess) -> None:
    """An Upgrade: websocket request through the proxy reaches a websocket backend and echoes."""
    import aiohttp
    from aiohttp import web

    from nodeagent.client.rest import Client

    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            await ws.send_str(f"echo {msg.data} via {request.headers.get('Host')}")
        return ws

    app = web.Application()
    app.router.add_get("/ws", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port("127.0.0.5")
    await web.TCPSite(runner, "127.0.0.5", port).start()
    try:
        async with Client(server.url, server.token, ca_file=str(server.ca_file)) as c:
            await c.create("services", {"apiVersion": "v1", "kind": "Service",
                                        "metadata": {"name": "ws", "namespace": "default"},
                                        "spec": {"ports": [{"name": "http", "port": 80}]}}, "default")
            await c.create("endpointslices.discovery.k8s.io", slice_for("ws", port, ["127.0.0.5"]), "default")
            await c.create("ingresses.networking.k8s.io", {
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": "ws", "namespace": "default"},
                "spec": {"rules": [{"host": "ws.test", "http": {"paths": [
                    {"path": "/ws", "pathType": "Exact",
                     "backend": {"service": {"name": "ws", "port": {"number": 80}}}}]}}]}}, "default")
        url = f"http://127.0.0.1:{ingress.http}/ws"
        async with aiohttp.ClientSession() as s:
            for _ in range(100):  # until the proxy has the new route
                async with s.get(url, headers={"Host": "ws.test"}) as r:
                    if r.status != 404:
                        break
                await asyncio.sleep(0.1)
            async with s.ws_connect(url, headers={"Host": "ws.test"}) as ws:
                await ws.send_str("hello")
                msg = await ws.receive(timeout=5)
        assert msg.data == "echo hello via ws.test"
    finally:
        await runner.cleanup()

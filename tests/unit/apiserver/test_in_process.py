"""The in-process entry: a component in the apiserver's process calls the handler chain directly, and the
server still sees who calls (authentication, RBAC, max-in-flight, metrics, warnings), answers with the same
codes, Status bodies and headers, and serves watches with the same semantics, ending them when it stops."""

from __future__ import annotations

import asyncio
import ssl
from typing import cast

import pytest
from aiohttp import web

from nodeagent.api.resources import builtin
from nodeagent.apiserver import inflight
from nodeagent.apiserver.auth import MASTERS_GROUP, TokenFile
from nodeagent.apiserver.authz import reconcile
from nodeagent.apiserver.authz.chain import Authorizer
from nodeagent.apiserver.cache import WatchCache
from nodeagent.apiserver.handlers import Handlers
from nodeagent.apiserver.in_process import LocalEntry
from nodeagent.apiserver.registry import Registry
from nodeagent.client import in_process
from nodeagent.client.rest import Client, ClientError
from nodeagent.store.memory import MemoryStore

NS = builtin("", "v1", "namespaces")
CM_PATH = "/api/v1/namespaces/d/configmaps"


@pytest.fixture
async def server(tmp_path):
    store = MemoryStore()
    reg = Registry(store)
    await reg.create(NS, None, {"metadata": {"name": "d"}})
    cache = WatchCache(store)
    await cache.start()
    reg.cache = cache
    await reconcile.ensure(reg)  # the bootstrap roles: system:kube-scheduler's among them
    tokens = TokenFile(tmp_path / "tokens.csv")
    h = Handlers(reg, cache, tokens, "127.0.0.1", authorizer=Authorizer(cache, store.get))
    entry = LocalEntry(h.handle)
    clients = {"admin": Client("https://127.0.0.1:1", tokens.issue("admin", (MASTERS_GROUP,)), local=entry),
               "scheduler": Client("https://127.0.0.1:1", tokens.issue("system:kube-scheduler", ()),
                                   local=entry)}
    yield h, entry, clients
    await entry.stop()
    await cache.stop()


async def test_the_server_sees_the_components_identity_and_rbac_refuses_it(server):
    h, entry, c = server
    await c["admin"].create("secrets", {"metadata": {"name": "s"}}, "d")
    assert (await c["admin"].get("secrets", "s", "d"))["metadata"]["name"] == "s"
    with pytest.raises(ClientError) as e:
        await c["scheduler"].get("secrets", "s", "d")
    assert e.value.code == 403 and e.value.status["reason"] == "Forbidden"
    assert 'User "system:kube-scheduler" cannot get resource "secrets"' in e.value.message
    assert (await c["scheduler"].list("nodes"))["kind"] == "NodeList"  # what its role grants
    unknown = Client("https://127.0.0.1:1", "no-such-token", local=entry)
    with pytest.raises(ClientError) as e:
        await unknown.list("nodes")
    assert (e.value.code, e.value.reason) == (401, "Unauthorized")
    text = h.metrics.render().decode()  # counted as an HTTP request is
    assert 'code="403"' in text and 'resource="secrets"' in text


async def test_a_full_in_flight_pool_answers_429_with_retry_after_and_the_client_retries(server):
    h, entry, c = server
    h.inflight = inflight.InFlightLimit(1, 1, h.metrics)
    headers = {"Authorization": f"Bearer {c['scheduler'].token}", "Content-Type": "application/json"}
    body = b'{"metadata": {"name": "a"}}'
    with h.inflight.admit(inflight.MUTATING, ()):
        got = await entry.call("POST", CM_PATH, {}, headers, body, 10)
        assert (got.status, got.headers["Retry-After"]) == (429, "1")
        assert got.body == b"Too many requests, please try again later.\n"
    # the client waits the second the server asked for and tries again, as over HTTP
    slot = h.inflight.admit(inflight.MUTATING, ())
    slot.__enter__()
    loop = asyncio.get_running_loop()
    loop.call_later(0.3, slot.__exit__, None, None, None)
    t0 = loop.time()
    event = {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "namespace": "d", "name": "p"},
             "reason": "Scheduled", "message": "m", "type": "Normal"}
    assert (await c["scheduler"].create("events", event, "d"))["metadata"]["name"] == "e"
    assert loop.time() - t0 >= 1.0  # refused once, served after Retry-After
    assert 'apiserver_dropped_requests_total{request_kind="mutating"} 2.0' in h.metrics.render().decode()


async def test_warnings_and_status_bodies_as_over_http(server):
    h, entry, c = server
    headers = {"Authorization": f"Bearer {c['admin'].token}", "Content-Type": "application/json"}
    got = await entry.call("POST", CM_PATH, {"fieldValidation": "Warn"}, headers,
                           b'{"metadata": {"name": "w"}, "bogus": 1}', 10)
    assert got.status == 201
    assert got.headers["Warning"] == '299 - "unknown field \\"bogus\\""'
    got = await entry.call("POST", CM_PATH, {}, headers, b'{"metadata": {"name": "w"}}', 10)
    assert got.status == 409 and b'"reason":"AlreadyExists"' in got.body


async def test_watch_events_bookmarks_and_timeout_through_the_entry(server):
    h, entry, c = server
    first = await c["admin"].create("configmaps", {"metadata": {"name": "x"}}, "d")
    seen: list[tuple[str, str]] = []

    async def watch() -> None:
        rv = first["metadata"]["resourceVersion"]
        async for ev in c["admin"].watch("configmaps", "d", resource_version=rv, timeout_seconds=1):
            seen.append((ev["type"], ev["object"]["metadata"].get("name", "")))

    task = asyncio.create_task(watch())
    await asyncio.sleep(0.05)
    await c["admin"].create("configmaps", {"metadata": {"name": "y"}}, "d")
    await c["admin"].delete("configmaps", "x", "d")
    await asyncio.wait_for(task, 5)  # timeoutSeconds ends the stream
    assert [s for s in seen if s[0] != "BOOKMARK"] == [("ADDED", "y"), ("DELETED", "x")]


async def test_a_refused_watch_raises_its_status(server):
    h, entry, c = server
    with pytest.raises(ClientError) as e:
        async for _ in c["scheduler"].watch("secrets", "d"):
            pass
    assert e.value.code == 403
    with pytest.raises(ClientError) as e:
        async for _ in c["admin"].watch("configmaps", "d", resource_version="1"):
            pass
    assert e.value.gone  # compacted away: 410 Expired


async def test_watches_end_when_the_server_stops_and_calls_are_refused_after(server):
    h, entry, c = server
    got: list[str] = []

    async def watch() -> None:
        async for ev in c["admin"].watch("configmaps", "d"):
            got.append(ev["type"])

    task = asyncio.create_task(watch())
    await asyncio.sleep(0.05)
    await entry.stop()
    await asyncio.wait_for(task, 5)  # the stream ended, as on a closed connection
    with pytest.raises(ClientError) as e:
        await c["admin"].list("configmaps", "d")
    assert (e.value.code, e.value.reason) == (0, "ConnectionError")


def test_streamed_subresources_stay_on_http():
    assert in_process.streamed("/api/v1/namespaces/d/pods/p/log")
    assert in_process.streamed("/api/v1/namespaces/d/pods/p/exec")
    assert in_process.streamed("/api/v1/nodes/n/proxy/metrics/cadvisor")
    assert in_process.streamed("/api/v1/namespaces/d/services/s/proxy/")
    assert not in_process.streamed("/api/v1/namespaces/d/pods/p/binding")
    assert not in_process.streamed("/api/v1/namespaces/d/pods")


def test_the_client_finds_the_server_of_its_socket_on_each_call_and_keeps_a_given_one_for_its_copies():
    class Fake:
        pass

    fake, other = cast(in_process.Server, Fake()), cast(in_process.Server, Fake())
    c = Client("https://127.0.0.1:1", "t", unix_socket="/run/x.sock")
    assert c.local is None  # nothing in this process serves that socket: the socket itself
    in_process.servers.register("/run/x.sock", fake)
    try:
        assert in_process.servers.lookup("/run/x.sock") is fake and c.local is fake
        assert c.with_token("u").local is fake and c.own_pool().local is fake
        in_process.servers.register("/run/x.sock", other)  # a server started again
        assert c.local is other
        given = Client("https://127.0.0.1:1", "t", local=fake)
        assert given.with_token("u").local is fake and given.own_pool().local is fake
        with_cert = Client("https://127.0.0.1:1", None, cert_data=b"x", key_data=b"y", insecure=True,
                           ssl_context=cast(ssl.SSLContext, object()), unix_socket="/run/x.sock")
        assert with_cert.local is None  # a certificate's identity is the TLS session's: HTTP
    finally:
        in_process.servers.unregister("/run/x.sock", other)
    assert in_process.servers.lookup("/run/x.sock") is None and c.local is None


async def test_a_watch_whose_caller_is_cancelled_before_it_starts_ends_its_handler():
    started = asyncio.Event()

    async def never_opens(request):
        started.set()
        await asyncio.sleep(3600)
        return web.Response(status=200)

    entry = LocalEntry(never_opens)
    w = asyncio.create_task(entry.watch("/api/v1/pods", {"watch": "1"}, {}))
    await started.wait()
    w.cancel()
    with pytest.raises(asyncio.CancelledError):
        await w
    await asyncio.sleep(0)
    assert not entry._tasks  # the handler was ended with its caller


async def test_a_call_past_its_deadline_times_out_and_its_handler_runs_on():
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(request):
        started.set()
        await release.wait()
        return web.Response(status=200, body=b"{}", content_type="application/json")

    entry = LocalEntry(slow)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(TimeoutError):
        await entry.call("GET", "/api/v1/nodes", {}, {}, None, 0.2)
    assert 0.2 <= loop.time() - t0 <= 2.5  # swept once a second
    assert started.is_set() and len(entry._tasks) == 1  # still served, as an HTTP handler whose client left
    release.set()
    await asyncio.sleep(0)
    got = await entry.call("GET", "/api/v1/nodes", {}, {}, None, 5)
    assert got.status == 200
    await entry.stop()
    assert not entry._tasks

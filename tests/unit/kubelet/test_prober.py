import asyncio
import socket
from typing import Any

import pytest
from aiohttp import web

from nodeagent.api.times import rfc3339
from nodeagent.kubelet.prober import (
    LIVENESS,
    PROBE_FIELDS,
    READINESS,
    STARTUP,
    Outcome,
    ProbeError,
    ProbeManager,
    Prober,
    ProbeSpec,
    Result,
    ResultsManager,
    Worker,
    format_url,
    probe_exec,
    probe_grpc,
    probe_http,
    probe_tcp,
    resolve_port,
)
from nodeagent.testing.clock import FakeClock


async def until(cond, limit: float = 5.0) -> None:
    """Let the event loop run until cond() holds (bounded, so a bug fails instead of hanging)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not cond():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def refused_port():
    """A port that refuses connections and that nobody else can take meanwhile: bound, never listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.fixture
async def http_server():
    seen = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        path = request.path
        if path == "/ok":
            return web.Response(text="fine")
        if path == "/created":
            return web.Response(status=201)
        if path == "/bad":
            return web.Response(status=500, text="boom")
        if path == "/notfound":
            return web.Response(status=404)
        if path == "/local-redirect":
            return web.Response(status=302, headers={"Location": "/ok"})
        if path == "/far-redirect":
            return web.Response(status=302, headers={"Location": "http://example.invalid/x"}, text="moved")
        if path == "/loop":
            return web.Response(status=302, headers={"Location": "/loop"})
        if path == "/redirect-to-bad":
            return web.Response(status=301, headers={"Location": "/bad"})
        if path == "/plain-304":
            return web.Response(status=304)
        if path == "/slow":
            await asyncio.sleep(1)
            return web.Response(text="late")
        if path == "/big":
            return web.Response(text="x" * 50_000)
        return web.Response(status=418)

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    yield port, seen
    await runner.cleanup()


async def test_http_success_and_failure(http_server):
    port, seen = http_server
    out = await probe_http(format_url("HTTP", "127.0.0.1", port, "/ok"), {"X-Custom": "1"}, 2)
    assert out == Outcome(Result.SUCCESS, "fine")
    assert seen[-1].headers["User-Agent"].startswith("kube-probe/")
    assert seen[-1].headers["X-Custom"] == "1"
    created = await probe_http(format_url("http", "127.0.0.1", port, "created"), None, 2)
    assert created.result == Result.SUCCESS
    assert await probe_http(format_url("HTTP", "127.0.0.1", port, "/bad"), None, 2) == Outcome(
        Result.FAILURE, "HTTP probe failed with statuscode: 500")
    not_found = await probe_http(format_url("HTTP", "127.0.0.1", port, "/notfound"), None, 2)
    assert not_found.output.endswith("404")


async def test_http_host_header_and_user_agent_override(http_server):
    port, seen = http_server
    await probe_http(format_url("HTTP", "127.0.0.1", port, "/ok"),
                     {"Host": "svc.example", "User-Agent": "me"}, 2)
    assert seen[-1].headers["Host"] == "svc.example"
    assert seen[-1].headers["User-Agent"] == "me"


async def test_http_redirects(http_server):
    port, seen = http_server
    base = f"http://127.0.0.1:{port}"
    assert await probe_http(base + "/local-redirect", None, 2) == Outcome(Result.SUCCESS, "fine")
    assert [r.path for r in seen[-2:]] == ["/local-redirect", "/ok"]
    out = await probe_http(base + "/far-redirect", None, 2)
    assert out == Outcome(Result.WARNING, "Probe terminated redirects, Response body: moved")
    out = await probe_http(base + "/loop", None, 2)
    assert out.result == Result.FAILURE and "stopped after 10 redirects" in out.output
    assert (await probe_http(base + "/redirect-to-bad", None, 2)).result == Result.FAILURE
    assert (await probe_http(base + "/plain-304", None, 2)).result == Result.WARNING


async def test_http_timeout_refused_and_body_limit(http_server, refused_port):
    port, _ = http_server
    out = await probe_http(f"http://127.0.0.1:{port}/slow", None, 0.3)
    assert out.result == Result.FAILURE and "context deadline exceeded" in out.output
    dead = refused_port
    out = await probe_http(f"http://127.0.0.1:{dead}/", None, 1)
    assert out.result == Result.FAILURE and "connection refused" in out.output
    out = await probe_http(f"http://127.0.0.1:{port}/big", None, 2)
    assert out.result == Result.SUCCESS and len(out.output) == 10 * 1024


async def test_tcp_probe(refused_port):
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert (await probe_tcp("127.0.0.1", port, 1)).result == Result.SUCCESS
    finally:
        server.close()
        await server.wait_closed()
    out = await probe_tcp("127.0.0.1", refused_port, 1)
    assert out == Outcome(Result.FAILURE, f"dial tcp 127.0.0.1:{refused_port}: connect: connection refused")


async def test_exec_probe():
    calls = []

    async def exec_sync(cid, cmd, timeout_s):
        calls.append((cid, cmd, timeout_s))
        if cmd[0] == "true":
            return 0, b"ok\n", b""
        if cmd[0] == "hang":
            await asyncio.sleep(10)
        return 1, b"out ", b"err"

    assert await probe_exec(exec_sync, "abc", ["true"], 1) == Outcome(Result.SUCCESS, "ok\n")
    assert calls[-1] == ("abc", ["true"], 1)
    assert await probe_exec(exec_sync, "abc", ["false"], 1) == Outcome(Result.FAILURE, "out err")
    out = await probe_exec(exec_sync, "abc", ["hang", "x"], 0.05)
    assert out == Outcome(Result.FAILURE, 'command "hang x" timed out')
    # a synchronous callable works too
    assert (await probe_exec(lambda c, cmd, t: (0, "", ""), "abc", ["x"], 1)).result == Result.SUCCESS


async def test_grpc_health_probe():
    import grpc

    state = {"status": 1}

    def check(request: bytes, context) -> bytes:
        assert request in (b"", b"\x0a\x03svc")
        return b"\x08" + bytes([state["status"]])

    handler = grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
        "Check": grpc.unary_unary_rpc_method_handler(check)})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        assert (await probe_grpc("127.0.0.1", port, "", 2)).result == Result.SUCCESS
        state["status"] = 2
        out = await probe_grpc("127.0.0.1", port, "svc", 2)
        assert out == Outcome(Result.FAILURE, 'service unhealthy (responded with "NOT_SERVING")')
    finally:
        await server.stop(None)


def test_resolve_port_and_defaults():
    c = {"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}
    assert resolve_port("http", c) == 8080
    assert resolve_port(81, c) == 81
    assert resolve_port("82", c) == 82
    with pytest.raises(ProbeError):
        resolve_port("nope", c)
    with pytest.raises(ProbeError):
        resolve_port(0, c)
    s = ProbeSpec.from_dict({"tcpSocket": {"port": 1}})
    assert (s.initial_delay, s.period, s.timeout, s.success_threshold, s.failure_threshold) == (
        0, 10, 1, 1, 3)
    assert format_url("HTTPS", "fd00::1", 443, "/h") == "https://[fd00::1]:443/h"


async def test_prober_named_port_pod_ip_and_events(http_server):
    port, _ = http_server
    events = []
    prober = Prober(on_event=lambda pod, c, typ, reason, msg: events.append((reason, msg)))
    c: dict[str, Any] = {"name": "web", "ports": [{"name": "http", "containerPort": port}],
                         "livenessProbe": {"httpGet": {"path": "/bad", "port": "http"}}}
    spec = ProbeSpec.from_dict(c["livenessProbe"])
    assert await prober.probe(LIVENESS, spec, {}, "127.0.0.1", c, "containerd://x") == Result.FAILURE
    assert events[-1] == ("Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 500")
    spec = ProbeSpec.from_dict({"httpGet": {"path": "/far-redirect", "port": port}})
    assert await prober.probe(READINESS, spec, {}, "127.0.0.1", c, "containerd://x") == Result.SUCCESS
    assert events[-1][0] == "ProbeWarning"


# -- worker logic with a fake clock and a scripted prober ------------------------------------------------


class ScriptedProber(Prober):
    """Answers each probe with the next of `results`."""

    def __init__(self, results):
        super().__init__()
        self.results = list(results)
        self.calls = 0

    async def probe(self, probe_type, spec, pod, pod_ip, container, cid):
        self.calls += 1
        return self.results.pop(0)


NOW = 1_700_000_000.0


def make(probe_type, probe, results, started=True, started_at=NOW, policy="Always", cid="containerd://c1"):
    clock = FakeClock(NOW)
    container = {"name": "app", PROBE_FIELDS[probe_type]: probe}
    pod = {"metadata": {"uid": "u1"}, "spec": {"containers": [container], "restartPolicy": policy}}
    status = {"phase": "Running", "podIP": "10.0.0.2", "containerStatuses": [
        {"name": "app", "containerID": cid, "started": started,
         "state": {"running": {"startedAt": rfc3339(started_at)}}}]}
    rm = ResultsManager()
    prober = ScriptedProber(results)
    w = Worker(probe_type, pod, container, prober, rm, lambda uid: status, clock)
    return w, rm, prober, status, clock



async def test_failure_threshold_then_hold_until_new_container():
    w, rm, prober, status, _ = make(LIVENESS, {"exec": {}, "failureThreshold": 3}, [Result.FAILURE] * 3)
    for _ in range(2):
        assert await w.do_probe()
        assert rm.get("containerd://c1") == Result.SUCCESS  # initial value for liveness
    assert await w.do_probe()
    assert rm.get("containerd://c1") == Result.FAILURE
    assert await w.do_probe()
    assert prober.calls == 3  # on hold
    prober.results += [Result.SUCCESS]
    status["containerStatuses"][0]["containerID"] = "containerd://c2"
    assert await w.do_probe()
    assert prober.calls == 4 and rm.get("containerd://c2") == Result.SUCCESS
    assert rm.get("containerd://c1") is None


async def test_readiness_success_threshold_and_updates():
    w, rm, prober, _, _ = make(READINESS, {"exec": {}, "successThreshold": 2, "failureThreshold": 1},
                               [Result.SUCCESS, Result.SUCCESS, Result.FAILURE])
    await w.do_probe()
    assert rm.get("containerd://c1") == Result.FAILURE  # initial for readiness
    await w.do_probe()
    assert rm.get("containerd://c1") == Result.SUCCESS
    await w.do_probe()
    assert rm.get("containerd://c1") == Result.FAILURE
    updates = [rm.updates.get_nowait().result for _ in range(rm.updates.qsize())]
    assert updates == [Result.FAILURE, Result.SUCCESS, Result.FAILURE]


async def test_initial_delay():
    w, rm, prober, _, clock = make(READINESS, {"exec": {}, "initialDelaySeconds": 5}, [Result.SUCCESS])
    await w.do_probe()
    assert prober.calls == 0
    clock.advance(5)
    await w.do_probe()
    assert prober.calls == 1 and rm.get("containerd://c1") == Result.SUCCESS


async def test_startup_gates_other_probes():
    w, rm, prober, status, _ = make(LIVENESS, {"exec": {}}, [Result.SUCCESS], started=False)
    await w.do_probe()
    assert prober.calls == 0
    s, rm2, p2, status2, _ = make(STARTUP, {"exec": {}}, [Result.SUCCESS], started=False)
    await s.do_probe()
    assert p2.calls == 1 and rm2.get("containerd://c1") == Result.SUCCESS
    status2["containerStatuses"][0]["started"] = True
    await s.do_probe()
    assert p2.calls == 1  # started: startup probing stops


async def test_not_running_container_and_terminal_pod():
    w, rm, prober, status, _ = make(READINESS, {"exec": {}}, [], policy="Never")
    status["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 1}}
    assert not await w.do_probe()
    assert rm.get("containerd://c1") == Result.FAILURE
    w, rm, prober, status, _ = make(READINESS, {"exec": {}}, [])
    status["phase"] = "Succeeded"
    assert not await w.do_probe()


async def test_run_loop_probes_each_period_and_stops():
    w, rm, prober, _, clock = make(READINESS, {"exec": {}, "periodSeconds": 7}, [Result.SUCCESS] * 10)
    task = asyncio.create_task(w.run())
    await until(lambda: prober.calls == 1 and clock.sleepers == 1)
    clock.advance(6.9)
    await asyncio.sleep(0.02)
    assert prober.calls == 1
    clock.advance(0.1)
    await until(lambda: prober.calls == 2)
    w.trigger()
    await until(lambda: prober.calls == 3)
    w.stop()
    await asyncio.wait_for(task, 1)
    assert rm.get("containerd://c1") is None


async def test_manager_end_to_end_with_fake_exec():
    clock = FakeClock(NOW)
    healthy = {"ok": False}

    async def exec_sync(cid, cmd, timeout_s):
        return (0 if healthy["ok"] else 1), b"", b""

    container = {"name": "app", "readinessProbe": {"exec": {"command": ["check"]}, "periodSeconds": 5},
                 "startupProbe": {"exec": {"command": ["check"]}, "periodSeconds": 1, "failureThreshold": 30}}
    pod = {"metadata": {"uid": "u1"}, "spec": {"containers": [container]}}
    status: dict[str, Any] = {"phase": "Running", "containerStatuses": [
        {"name": "app", "containerID": "containerd://c1", "started": False,
         "state": {"running": {"startedAt": rfc3339(NOW)}}}]}
    mgr = ProbeManager(Prober(exec_sync), lambda uid: status, clock)
    runner = asyncio.create_task(mgr.run())
    await mgr.wait_ready()
    mgr.add_pod(pod)
    await until(lambda: mgr.startup.get("containerd://c1") is not None and clock.sleepers == 2)
    ids, running = {"app": "containerd://c1"}, {"app": True}
    assert mgr.started_and_ready(pod, ids, running) == ({"app": False}, {"app": False})
    healthy["ok"] = True
    clock.advance(1)
    await until(lambda: mgr.startup.get("containerd://c1") == Result.SUCCESS)
    status["containerStatuses"][0]["started"] = True
    # the first status that reports the container started triggers its readiness probe at once
    mgr.started_and_ready(pod, ids, running)
    await until(lambda: mgr.readiness.get("containerd://c1") == Result.SUCCESS)
    assert mgr.started_and_ready(pod, ids, running) == ({"app": True}, {"app": True})
    mgr.remove_pod("u1")
    await until(lambda: not mgr.has_worker("u1", "app", READINESS))
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner


def test_no_probes_means_started_and_ready():
    mgr = ProbeManager(Prober(), lambda uid: None)
    pod = {"metadata": {"uid": "u"}, "spec": {"containers": [{"name": "a"}]}}
    assert mgr.started_and_ready(pod, {"a": "x"}, {"a": True}) == ({"a": True}, {"a": True})
    assert mgr.started_and_ready(pod, {"a": "x"}, {"a": False}) == ({"a": False}, {"a": False})


async def test_deleting_pod_stops_liveness_with_success():
    w, rm, prober, status, _ = make(LIVENESS, {"exec": {}}, [Result.FAILURE])
    mgr = ProbeManager(Prober(), lambda uid: status)
    mgr._workers[("u1", "app", LIVENESS)] = w
    deleting = dict(w.pod, metadata={"uid": "u1", "deletionTimestamp": "2026-01-01T00:00:00Z"})
    mgr.update_pod(deleting)
    assert not await w.do_probe()
    assert prober.calls == 0 and rm.get("containerd://c1") == Result.SUCCESS

"""The kubelet's API rate limits (--kube-api-qps/--kube-api-burst, --event-qps/--event-burst): client-go's
token bucket, the flags on `up`/`agent` with kubelet's defaults and messages, and the limit on the wire."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from nodeagent.client.ratelimit import TokenBucket
from nodeagent.client.rest import Client
from nodeagent.testing.clock import FakeClock
from tests.unit.test_configs import _agent, _up


async def _taken(clock: FakeClock, bucket: TokenBucket, n: int) -> list[float]:
    """When (fake seconds after the start) each of `n` concurrent waiters got its token."""
    start = clock.t
    got: list[float] = []

    async def one() -> None:
        await bucket.wait()
        got.append(clock.t - start)

    tasks = [asyncio.create_task(one()) for _ in range(n)]
    while not all(t.done() for t in tasks):
        await asyncio.sleep(0)
        if clock.sleepers:
            clock.advance(0.01)
    return got


async def test_burst_goes_at_once_then_qps():
    clock = FakeClock()
    got = await _taken(clock, TokenBucket(10, 5, clock), 15)
    assert got[:5] == [0.0] * 5
    rest = got[5:]
    assert rest == sorted(rest)
    assert rest[-1] == pytest.approx(1.0, abs=0.02)  # ten more at 10/s
    assert all(b - a == pytest.approx(0.1, abs=0.02) for a, b in zip(rest, rest[1:], strict=False))


async def test_zero_means_client_go_defaults_and_negative_is_refused():
    b = TokenBucket(0, 0)
    assert (b.qps, b.burst) == (5.0, 10)
    with pytest.raises(ValueError, match="must not be negative"):
        TokenBucket(-1, 10)


async def test_idle_bucket_refills_to_burst_only():
    clock = FakeClock()
    bucket = TokenBucket(100, 3, clock)
    await _taken(clock, bucket, 3)
    clock.advance(60)
    got = await _taken(clock, bucket, 4)
    assert got[:3] == [0.0] * 3 and got[3] == pytest.approx(0.01, abs=0.011)


def test_flags_default_to_kubelets_and_reach_the_config(tmp_path):
    cfg = _up(tmp_path).kubelet
    assert (cfg.kube_api_qps, cfg.kube_api_burst, cfg.event_qps, cfg.event_burst) == (50.0, 100, 50.0, 100)
    cfg = _agent(tmp_path, "--kube-api-qps", "20", "--kube-api-burst", "30", "--event-qps", "7",
                 "--event-burst", "8").kubelet
    assert (cfg.kube_api_qps, cfg.kube_api_burst, cfg.event_qps, cfg.event_burst) == (20.0, 30, 7.0, 8)


@pytest.mark.parametrize(("argv", "says"), [
    (["--kube-api-qps", "-1"], r"kubeAPIQPS \(--kube-api-qps\) -1 must not be a negative number"),
    (["--kube-api-burst", "-5"], r"kubeAPIBurst \(--kube-api-burst\) -5 must not be a negative number"),
    (["--event-qps", "-2"], r"eventRecordQPS \(--event-qps\) -2 must not be a negative number"),
    (["--event-burst", "-3"], r"eventBurst \(--event-burst\) -3 must not be a negative number"),
])
def test_negative_limits_are_refused_with_kubelets_message(tmp_path, argv, says):
    with pytest.raises(SystemExit, match=says):
        _up(tmp_path, *argv)
    with pytest.raises(SystemExit, match=says):
        _agent(tmp_path, *argv)


async def test_the_kubelet_client_waits_for_its_tokens():
    """A client built from the kubelet config sends `burst` requests at once, the rest at `qps`."""
    hits: list[float] = []

    async def handler(request: web.Request) -> web.Response:
        hits.append(asyncio.get_running_loop().time())
        return web.json_response({"kind": "Pod", "metadata": {"name": request.match_info["name"]}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/default/pods/{name}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    client = Client(f"http://127.0.0.1:{runner.addresses[0][1]}", limiter=TokenBucket(20, 4))
    try:
        await asyncio.gather(*(client.get("pods", f"p{i}", "default") for i in range(8)))
    finally:
        await client.close()
        await runner.cleanup()
    assert len(hits) == 8
    hits.sort()
    # four at once, then four more at 20/s: the last sent 4/20 s after the first; the first hit also waited
    # for its connection (tens of ms on a loaded host), which the later ones reuse
    assert hits[-1] - hits[0] >= 0.15


def test_config_file_fields_and_flags_over_them(tmp_path):
    from tests.unit.kubelet.test_kubelet_config_file import _file

    f = _file(tmp_path, kubeAPIQPS=10, kubeAPIBurst=20, eventRecordQPS=3, eventBurst=4)
    cfg = _up(tmp_path, "--config", f, "--kube-api-qps", "15").kubelet
    assert (cfg.kube_api_qps, cfg.kube_api_burst, cfg.event_qps, cfg.event_burst) == (15, 20, 3, 4)

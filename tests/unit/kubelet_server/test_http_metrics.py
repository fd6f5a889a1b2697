"""kubelet_http_requests_total and kubelet_http_inflight_requests: labelled as the kubelet labels them, and a
request stays in flight exactly until its answer is done or its client goes (a silent `logs -f` included)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from cri.proto import api_pb2 as pb
from nodeagent.kubelet.labels import CONTAINER_NAME_LABEL, POD_UID_LABEL
from nodeagent.kubelet.server.app import KubeletServer, ServerDeps
from nodeagent.kubelet.server.metrics import KubeletMetrics, http_labels
from nodeagent.testing.fake_cri import FakeRuntime, serve


@pytest.mark.parametrize("method,path,labels", [
    ("GET", "/containerLogs/default/p/main", ("GET", "containerLogs", "rw", "false")),
    ("POST", "/exec/default/p/main", ("POST", "exec", "rw", "true")),
    ("GET", "/attach/default/p/uid/main", ("GET", "attach", "rw", "true")),
    # the kubelet's long-running map says "portforward" while the root is "portForward"
    ("POST", "/portForward/default/p", ("POST", "portForward", "rw", "false")),
    ("GET", "/metrics", ("GET", "metrics", "rw", "false")),
    ("GET", "/metrics/resource", ("GET", "metrics/resource", "rw", "false")),
    ("GET", "/metrics/", ("GET", "other", "rw", "false")),
    ("GET", "/stats/summary", ("GET", "stats", "rw", "false")),
    ("GET", "/", ("GET", "other", "rw", "false")),
    ("GET", "/nowhere/x", ("GET", "other", "rw", "false")),
    ("PATCH", "/pods", ("other", "pods", "rw", "false")),
])
def test_labels_follow_the_kubelet(method, path, labels):
    assert http_labels(method, path, "rw") == labels


def _inflight(m: KubeletMetrics, path: str) -> float | None:
    return m.registry.get_sample_value("kubelet_http_inflight_requests", {
        "method": "GET", "path": path, "server_type": "readonly", "long_running": "false"})


async def _until(what: str, ok) -> None:
    end = time.monotonic() + 10
    while not ok():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_silent_follow_is_in_flight_until_its_client_goes(tmp_path):
    log = tmp_path / "0.log"
    log.write_bytes(b"")  # a container that has written nothing: the follow sends nothing either
    runtime = FakeRuntime()
    runtime.containers["c1"] = pb.ContainerStatus(
        id="c1", metadata=pb.ContainerMetadata(name="main"), state=pb.CONTAINER_RUNNING, log_path=str(log),
        labels={POD_UID_LABEL: "u1", CONTAINER_NAME_LABEL: "main"})
    runtime.container_sandbox["c1"] = "sb1"
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"},
           "spec": {"containers": [{"name": "main"}]}}
    metrics = KubeletMetrics()
    async with serve(runtime) as cri:
        server = KubeletServer(ServerDeps("n1", cri, lambda: [pod], metrics, str(tmp_path), str(tmp_path)),
                               None)
        port = await server.start("127.0.0.1", 0, None)
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(f"{base}/containerLogs/default/p/main") as r:
                    assert r.status == 200 and await r.read() == b""
                assert _inflight(metrics, "containerLogs") == 0, "a finished request is no longer in flight"

                follow = asyncio.create_task(s.get(f"{base}/containerLogs/default/p/main?follow=true"))
                await _until("the follow in flight", lambda: _inflight(metrics, "containerLogs") == 1)
                # a scrape is in flight while it renders, in its own series
                async with s.get(f"{base}/metrics") as r:
                    text = await r.text()
                for path in ("metrics", "containerLogs"):
                    assert ('kubelet_http_inflight_requests{long_running="false",method="GET",'
                            f'path="{path}",server_type="readonly"}} 1.0') in text
                assert not follow.done(), "a silent follow has nothing to answer yet"
                follow.cancel()  # the client goes: its connection is closed
                with pytest.raises(asyncio.CancelledError):
                    await follow
            await _until("the follow to end", lambda: _inflight(metrics, "containerLogs") == 0)
            assert _inflight(metrics, "metrics") == 0
            assert metrics.registry.get_sample_value("kubelet_http_requests_total", {
                "method": "GET", "path": "containerLogs", "server_type": "readonly",
                "long_running": "false"}) == 2
        finally:
            await server.stop()

"""pods/log and pods/exec are proxied to the node's kubelet API (a stand-in kubelet here: the real one is a
later issue); real kubectl and the Python client's websocket exec go through the apiserver unchanged."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import threading
import uuid

import pytest
import yaml
from aiohttp import web

from cri.server import spdy_streams as sp
from nodeagent.apiserver import pki
from tests.integration.apiserver.conftest import KUBECTL_132

pytestmark = pytest.mark.e2e


@pytest.fixture
def fake_kubelet(tmp_path):
    """A TLS server answering /containerLogs and /exec (SPDY/3.1 v4.channel.k8s.io, or a v5/v4 websocket),
    in its own thread."""
    crt, key = pki.ensure_serving_cert(tmp_path / "pki", ["127.0.0.1"])
    seen: list[str] = []
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict = {}

    async def logs(request: web.Request) -> web.Response:
        seen.append(request.path_qs)
        return web.Response(text="line1\nline2\n")

    async def exec_(request: web.Request) -> web.StreamResponse:
        seen.append(request.path_qs)
        hello = b"hello from " + request.match_info["pod"].encode() + b"\n"
        if sp.is_spdy_upgrade(request):  # what kube-apiserver (and ours) speaks to a kubelet for a v5 client
            queue: asyncio.Queue[sp.Stream] = asyncio.Queue()
            accepted = await sp.accept_spdy(request, sp.EXEC_SPDY_PROTOCOLS, "channel.k8s.io",
                                            queue.put_nowait)
            if isinstance(accepted, web.Response):
                return accepted
            session, version, resp = accepted
            req = {k: request.query.get(k) in ("true", "1") for k in ("stdin", "stdout", "stderr", "tty")}
            streams = await sp.RemoteCommand.wait_for_streams(queue, version, req)
            rc = sp.RemoteCommand(session, version, streams)
            await rc.send("stdout", hello)
            await rc.close_output()
            await rc.write_status(b'{"metadata":{},"status":"Success"}', None)
            await session.close()
            return resp
        ws = web.WebSocketResponse(protocols=["v5.channel.k8s.io", "v4.channel.k8s.io"])
        await ws.prepare(request)
        await ws.send_bytes(b"\x01" + hello)
        await ws.send_bytes(b'\x03{"metadata":{},"status":"Success"}')
        await ws.close()
        return ws

    async def healthz(request: web.Request) -> web.Response:
        seen.append(request.path_qs)
        return web.Response(text="ok")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/containerLogs/{ns}/{pod}/{c}", logs)
        app.router.add_route("*", "/exec/{ns}/{pod}/{c}", exec_)
        runner = web.AppRunner(app)
        await runner.setup()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(crt), str(key))
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        box["port"] = runner.addresses[0][1]
        box["runner"] = runner
        started.set()

    t = threading.Thread(target=lambda: (loop.run_until_complete(main()), loop.run_forever()), daemon=True)
    t.start()
    assert started.wait(10)
    yield box["port"], seen
    asyncio.run_coroutine_threadsafe(box["runner"].cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    t.join(10)


def test_logs_and_exec_reach_the_kubelet(server, fake_kubelet):
    port, seen = fake_kubelet
    env = server.env()
    node, ns = f"n-{uuid.uuid4().hex[:6]}", "default"

    def kubectl(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([KUBECTL_132, *args], input=input, capture_output=True, text=True,
                              env=env, timeout=60)

    assert kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
        "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}})).returncode == 0
    pod = f"p-{uuid.uuid4().hex[:6]}"
    assert kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}})).returncode == 0
    p = kubectl("get", "--raw", f"/api/v1/nodes/{node}/proxy/healthz")
    assert p.returncode == 0 and p.stdout == "ok", p.stderr
    p = kubectl("logs", "-n", ns, pod, "--tail=5")
    assert p.returncode == 0 and p.stdout == "line1\nline2\n", p.stderr
    assert any(s.startswith(f"/containerLogs/{ns}/{pod}/c") and "tailLines=5" in s for s in seen)

    from kubernetes import client, config
    from kubernetes.stream import stream

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(server.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        out = stream(client.CoreV1Api(api).connect_get_namespaced_pod_exec, pod, ns, command=["echo", "hi"],
                     stderr=True, stdin=False, stdout=True, tty=False)
    assert out == f"hello from {pod}\n"
    assert any(s.startswith(f"/exec/{ns}/{pod}/c") and "command=echo" in s for s in seen)
    p = kubectl("exec", "-n", ns, pod, "--", "echo", "hi")  # kubectl >= 1.30: websocket through the apiserver
    assert p.returncode == 0 and p.stdout == f"hello from {pod}\n", p.stderr
    kubectl("delete", "-n", ns, "pod", pod, "--grace-period=0", "--force")
    kubectl("delete", "node", node)

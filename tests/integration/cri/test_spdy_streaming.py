"""Exec, Attach and PortForward over SPDY/3.1 on the runtime's streaming URLs, driven by the test's own
SPDY client (tests/integration/cri/spdy_client.py), raw and tunnelled in a websocket."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import pytest

from tests.integration.cri.spdy_client import SpdyClient

pytestmark = pytest.mark.root

V4 = "v4.channel.k8s.io"


async def _exec(url: str, protocols: list[str], kinds: list[str], stdin: bytes | None = None,
                resize: dict | None = None) -> tuple[SpdyClient, dict[str, bytes]]:
    c = await SpdyClient.upgrade(url, protocols)
    assert c.status == 101, c.response_headers
    streams = {}
    for kind in kinds:  # kubectl's order: error first, then stdin/stdout/stderr/resize
        streams[kind] = await c.open({"streamtype": kind})
    for s in streams.values():
        await asyncio.wait_for(s.replied.wait(), 10)
    if resize is not None:
        await streams["resize"].write(json.dumps(resize).encode() + b"\n")
    if stdin is not None:
        await streams["stdin"].write(stdin)
        await streams["stdin"].close()
    got = {}
    for kind in ("stdout", "stderr", "error"):
        if kind in streams:
            try:
                got[kind] = await streams[kind].read_all()
            except TimeoutError:
                state = {k: (bytes(s.data[-200:]), s.finished.is_set(), s.reset_status)
                         for k, s in streams.items()}
                raise AssertionError(f"no FIN on {kind}: {state}") from None
    await asyncio.wait_for(c.goaway.wait(), 10)  # the server ends the session with GOAWAY
    await c.close()
    return c, got


def test_exec_v4_stdio_and_exit_code(cri, pods):
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["sleep", "300"])
    url = cri.client.exec(cid, ["sh", "-c", "cat; echo done >&2; exit 3"], stdin=True, stdout=True,
                          stderr=True)
    c, got = asyncio.run(_exec(url, [V4, "v3.channel.k8s.io", "channel.k8s.io"],
                               ["error", "stdin", "stdout", "stderr"], stdin=b"hello\n" * 20000))
    assert c.response_headers["x-stream-protocol-version"] == [V4]
    assert c.response_headers["upgrade"] == ["SPDY/3.1"]
    assert got["stdout"] == b"hello\n" * 20000  # 120 KB: more than one 64 KiB window each way
    assert got["stderr"] == b"done\n"
    status = json.loads(got["error"])
    assert status["status"] == "Failure" and status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    assert 9 in c.seen  # the server gave window back (WINDOW_UPDATE) for what it read


def test_exec_success_and_older_protocol_versions(cri, pods):
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["sleep", "300"])
    cl = cri.client
    url = cl.exec(cid, ["echo", "ok"], stdout=True)
    _, got = asyncio.run(_exec(url, [V4], ["error", "stdout"]))
    assert got["stdout"] == b"ok\n" and json.loads(got["error"])["status"] == "Success"
    # v2: the error stream carries only a failure's text, and nothing on success
    url = cl.exec(cid, ["sh", "-c", "exit 7"], stdout=True)
    c, got = asyncio.run(_exec(url, ["v2.channel.k8s.io"], ["error", "stdout"]))
    assert c.response_headers["x-stream-protocol-version"] == ["v2.channel.k8s.io"]
    assert got["error"] == b"command terminated with non-zero exit code: 7"
    url = cl.exec(cid, ["true"], stdout=True)
    _, got = asyncio.run(_exec(url, ["v2.channel.k8s.io"], ["error", "stdout"]))
    assert got["error"] == b""


def test_exec_tty_with_resize(cri, pods):
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["sleep", "300"])
    url = cri.client.exec(cid, ["sh", "-c", "read x; tty; stty size"], tty=True, stdin=True, stdout=True)
    _, got = asyncio.run(_exec(url, [V4], ["error", "stdin", "stdout", "resize"], stdin=b"go\n",
                               resize={"Width": 123, "Height": 45}))
    out = got["stdout"].decode()
    assert "/dev/pts/" in out and "45 123" in out
    assert json.loads(got["error"])["status"] == "Success"


def test_negotiation_and_one_time_urls(cri, pods):
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["sleep", "300"])
    cl = cri.client
    url = cl.exec(cid, ["true"], stdout=True)

    async def go():
        c = await SpdyClient.upgrade(url, ["v9.channel.k8s.io"])
        assert c.status == 403
        assert set(c.response_headers["x-accepted-stream-protocol-versions"]) >= {V4, "channel.k8s.io"}
        again = await SpdyClient.upgrade(url, [V4])  # the token is spent
        assert again.status == 404
    asyncio.run(go())


def test_ping_echo_and_client_disconnect_kills_the_command(cri, pods):
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["sleep", "300"])
    url = cri.client.exec(cid, ["sh", "-c", "echo started; exec sleep 1000"], stdout=True)

    async def go():
        c = await SpdyClient.upgrade(url, [V4])
        await c.open({"streamtype": "error"})
        out = await c.open({"streamtype": "stdout"})
        await out.read_until(b"started")
        await c.ping(7)
        for _ in range(100):
            if 7 in c.pongs:
                break
            await asyncio.sleep(0.05)
        assert c.pongs == [7]
        await c.close()
    asyncio.run(go())
    for _ in range(100):
        r = cri.client.exec_sync(cid, ["sh", "-c", "ps -o args | grep -c '^[s]leep 1000' || true"])
        if r.stdout.strip() == b"0":
            break
        time.sleep(0.1)
    assert r.stdout.strip() == b"0", r.stdout


def test_attach_streams_output_and_exit_status(cri, pods):
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg,
                         ["sh", "-c", "sleep 1; echo attached-out; echo attached-err >&2; sleep 1; exit 4"])
    url = cri.client.attach(cid, stdout=True, stderr=True)
    _, got = asyncio.run(_exec(url, [V4], ["error", "stdout", "stderr"]))
    assert b"attached-out\n" in got["stdout"] and b"attached-err\n" in got["stderr"]
    status = json.loads(got["error"])
    assert status["details"]["causes"][0]["message"] == "4"


def _httpd_pod(cri, pods):
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/etc"])
    for _ in range(50):
        got = cri.client.exec_sync(cid, ["wget", "-q", "-O", "-", "http://127.0.0.1:8080/hostname"])
        if got.exit_code == 0:
            break
        time.sleep(0.1)
    return sid, scfg


async def _forward(c: SpdyClient, rid: int, port: int, request: bytes) -> tuple[bytes, bytes]:
    err = await c.open({"streamtype": "error", "port": str(port), "requestid": str(rid)})
    await err.close()  # kubectl half-closes the error stream at once
    data = await c.open({"streamtype": "data", "port": str(port), "requestid": str(rid)})
    await data.write(request)
    body = await data.read_all()
    return body, await err.read_all()


def test_port_forward_concurrent_requests_and_errors(cri, pods):
    sid, scfg = _httpd_pod(cri, pods)
    url = cri.client.port_forward(sid, [8080])
    request = b"GET /hostname HTTP/1.0\r\nHost: x\r\n\r\n"

    async def go():
        c = await SpdyClient.upgrade(url, ["portforward.k8s.io"])
        assert c.status == 101 and c.response_headers["x-stream-protocol-version"] == ["portforward.k8s.io"]
        results = await asyncio.gather(*(_forward(c, i, 8080, request) for i in range(4)))
        refused = await _forward(c, 99, 8081, request)
        await c.close()
        return results, refused
    results, (body, err) = asyncio.run(go())
    for body_ok, err_ok in results:
        assert b"200 OK" in body_ok and scfg.hostname.encode() in body_ok
        assert err_ok == b""
    assert body == b"" and b"8081" in err and b"refused" in err.lower()


def test_port_forward_through_a_websocket_tunnel(cri, pods):
    sid, scfg = _httpd_pod(cri, pods)
    cid = cri.client.list_containers(pod_sandbox_id=sid)[0].id
    assert cri.client.exec_sync(cid, ["sh", "-c", "head -c 2097152 /dev/urandom > /etc/big"]).exit_code == 0
    big_md5 = cri.client.exec_sync(cid, ["md5sum", "/etc/big"]).stdout.split()[0].decode()
    url = cri.client.port_forward(sid, [8080])
    request = b"GET /hostname HTTP/1.0\r\nHost: x\r\n\r\n"

    async def go():
        c = await SpdyClient.tunnel(url, "portforward.k8s.io")
        assert c.response_headers["sec-websocket-protocol"] == ["SPDY/3.1+portforward.k8s.io"]
        await c.settings_initial_window(1 << 20)
        out = await asyncio.gather(_forward(c, 0, 8080, request), _forward(c, 1, 8080, request),
                                   _forward(c, 2, 8080, b"GET /big HTTP/1.0\r\n\r\n"))
        await c.close()
        return out
    results = asyncio.run(go())
    for body, err in results[:2]:
        assert b"200 OK" in body and scfg.hostname.encode() in body and err == b""
    body, err = results[2]  # 2 MiB: the server waits on our windows (we send WINDOW_UPDATE as we read)
    assert err == b"" and hashlib.md5(body.split(b"\r\n\r\n", 1)[1]).hexdigest() == big_md5


def test_many_interactive_execs_at_once(cri, pods):
    """Sessions waiting on their client's input must not hold up each other (no thread per blocked read)."""
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["sleep", "300"])
    urls = [cri.client.exec(cid, ["cat"], stdin=True, stdout=True, stderr=True) for _ in range(8)]

    async def one(i: int, url: str, opened: asyncio.Barrier) -> bytes:
        c = await SpdyClient.upgrade(url, [V4])
        err = await c.open({"streamtype": "error"})
        stdin = await c.open({"streamtype": "stdin"})
        out = await c.open({"streamtype": "stdout"})
        await c.open({"streamtype": "stderr"})
        await opened.wait()  # every command is running and blocked on its stdin
        await stdin.write(f"session {i}\n".encode())
        await stdin.close()
        data = await out.read_all()
        assert b"Success" in await err.read_all()
        await c.close()
        return data

    async def go():
        opened = asyncio.Barrier(len(urls))
        return await asyncio.wait_for(asyncio.gather(*(one(i, u, opened) for i, u in enumerate(urls))), 60)
    assert asyncio.run(go()) == [f"session {i}\n".encode() for i in range(len(urls))]

"""Exec, Attach and PortForward over the streaming URL, with the websocket channel.k8s.io protocols."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import grpc
import pytest

pytestmark = pytest.mark.root


async def _session(url: str, protocol: str, to_send: list[bytes], until_close: bool = True):
    got: dict[int, bytes] = {}
    async with aiohttp.ClientSession() as s, s.ws_connect(url, protocols=[protocol]) as ws:
        assert ws.protocol == protocol
        for m in to_send:
            await ws.send_bytes(m)
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.BINARY:
                break
            got[msg.data[0]] = got.get(msg.data[0], b"") + msg.data[1:]
    return got


def test_exec_stream_with_stdin_and_exit_code(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["sleep", "300"])
    url = c.exec(cid, ["sh", "-c", "cat; echo done >&2; exit 3"], stdin=True, stdout=True, stderr=True)
    got = asyncio.run(_session(url, "v5.channel.k8s.io", [b"\x00hello\n", b"\xff\x00"]))
    assert got[1] == b"hello\n" and got[2] == b"done\n"
    status = json.loads(got[3])
    assert status["status"] == "Failure" and status["details"]["causes"][0]["message"] == "3"
    # a URL is good for one session only
    with pytest.raises(aiohttp.WSServerHandshakeError):
        asyncio.run(_session(url, "v5.channel.k8s.io", []))


def test_exec_with_tty(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["sleep", "300"])
    url = c.exec(cid, ["sh", "-c", "tty; stty size"], tty=True, stdout=True)
    got = asyncio.run(_session(url, "v4.channel.k8s.io",
                               [b"\x04" + json.dumps({"Width": 100, "Height": 40}).encode()]))
    out = got[1].decode()
    assert "/dev/pts/" in out
    assert json.loads(got[3])["status"] == "Success"
    with pytest.raises(grpc.RpcError) as e:
        c.exec(cid, ["sh"], tty=True, stdout=True, stderr=True)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_attach_streams_output(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg,
                         ["sh", "-c", "sleep 1; echo attached-out; echo attached-err >&2; sleep 1"])
    url = c.attach(cid, stdout=True, stderr=True)
    got = asyncio.run(_session(url, "v4.channel.k8s.io", []))
    assert b"attached-out\n" in got[1] and b"attached-err\n" in got[2]
    with pytest.raises(grpc.RpcError) as e:  # created without stdin: nothing to attach it to
        c.attach(cid, stdin=True)
    assert e.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION)


def test_port_forward_reaches_the_pods_localhost(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/etc"])
    for _ in range(50):
        if c.exec_sync(cid, ["wget", "-q", "-O", "-", "http://127.0.0.1:8080/hostname"]).exit_code == 0:
            break
        time.sleep(0.1)
    url = c.port_forward(sid, [8080])
    request = b"GET /hostname HTTP/1.0\r\nHost: x\r\n\r\n"
    got = asyncio.run(_session(url, "v4.channel.k8s.io", [b"\x00" + request]))
    data = got[0]
    assert data[:2] == (8080).to_bytes(2, "little")
    assert b"200 OK" in data and scfg.hostname.encode() in data

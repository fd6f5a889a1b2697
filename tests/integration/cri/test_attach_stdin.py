"""Attach with stdin, stdin_once and a terminal, through the CRI socket and the streaming URL, on our
runtime and on Debian's containerd + runc (same client: a check that fails on containerd is suspect).

containerd 1.6's streaming server speaks SPDY and websocket up to v4.channel.k8s.io; v5 (its stdin
close message) is checked on ours only.
"""

from __future__ import annotations

import asyncio
import os
import time

import grpc
import pytest

from cri.client import container_config
from cri.proto import api_pb2 as pb
from tests.integration.cri.attach_client import V4, V5, SpdyAttach, WsAttach
from tests.integration.cri.conftest import BUSYBOX, Pods
from tests.integration.cri.test_peer_containerd import peer, ppods  # noqa: F401 - the runtimes, as fixtures

pytestmark = [pytest.mark.root, pytest.mark.slow]


def _container(d, pods: Pods, command: list[str], name: str, **flags) -> tuple[str, str]:
    sid, scfg = pods.run()
    cfg = container_config(name, BUSYBOX, command, log_path=f"{name}/0.log")
    for k, v in flags.items():
        setattr(cfg, k, v)
    cid = d.client.create_container(sid, cfg, scfg)
    d.client.start_container(cid)
    assert d.client.wait_container_state(cid, pb.CONTAINER_RUNNING).state == pb.CONTAINER_RUNNING
    return sid, cid


def _attach_url(d, cid: str, **kw) -> str:
    return d.client.attach(cid, **kw)


def _state(d, cid: str) -> pb.ContainerStatus:
    return d.client.container_status(cid).status


def test_cat_echoes_what_attach_sends(peer, ppods):  # noqa: F811
    name, d = peer
    _, cid = _container(d, ppods, ["cat"], "cat", stdin=True)

    async def go() -> None:
        # SPDY: the echo comes back; the end of our stdin ends the session (not stdin_once), cat lives on.
        a = await SpdyAttach.open(_attach_url(d, cid, stdin=True, stdout=True, stderr=True),
                                  ["stdin", "stdout", "stderr"])
        await a.until(b"spdy-hello\n", resend=b"spdy-hello\n")
        # a large write, within one SPDY window (the test client knows WINDOW_UPDATE, not SETTINGS)
        big = b"x" * 60000 + b"\n"
        await a.send(big)
        await a.until(big)
        await a.streams["stdin"].close()
        assert (await a.status(goaway=name == "nodeagent"))["status"] == "Success"
        await a.close()
        # websocket v4 (every runtime) and v5 (ours): a second session feeds the same stdin.
        w = await WsAttach.open(_attach_url(d, cid, stdin=True, stdout=True, stderr=True), V4)
        await w.until(b"ws-hello\n", resend=b"ws-hello\n")
        await w.close()
        if name == "nodeagent":
            w = await WsAttach.open(_attach_url(d, cid, stdin=True, stdout=True), V5)
            await w.until(b"v5-hello\n", resend=b"v5-hello\n")
            await w.close_stdin()
            assert (await w.status())["status"] == "Success"
            await w.close()
    asyncio.run(go())
    time.sleep(0.5)
    assert _state(d, cid).state == pb.CONTAINER_RUNNING  # its stdin stayed open between sessions


def test_stdin_once_closes_stdin_after_the_first_session(peer, ppods):  # noqa: F811
    name, d = peer
    script = "read x; echo got $x; cat >/dev/null; echo eof-seen"
    _, cid = _container(d, ppods, ["sh", "-c", script], "once", stdin=True, stdin_once=True)

    async def go() -> dict:
        a = await SpdyAttach.open(_attach_url(d, cid, stdin=True, stdout=True, stderr=True),
                                  ["stdin", "stdout", "stderr"])
        await a.send(b"hello\n")
        await a.until(b"got hello\n")
        await a.send(b"ignored by cat\n")
        await a.streams["stdin"].close()  # stdin_once: the container's stdin closes, output goes on
        await a.until(b"eof-seen\n")
        try:
            status = await a.status(goaway=name == "nodeagent")
        except TimeoutError:
            raise AssertionError({k: (bytes(s.data[-200:]), s.finished.is_set(), s.reset_status)
                                  for k, s in a.streams.items()}) from None
        await a.close()
        return status
    status = asyncio.run(go())
    assert status["status"] == "Success", status
    st = d.client.wait_container_state(cid, pb.CONTAINER_EXITED)
    assert st.state == pb.CONTAINER_EXITED and st.exit_code == 0


def test_stdin_once_ends_with_the_sessions_connection(peer, ppods):  # noqa: F811
    """A client that just goes away (websocket v4 has no stdin close message) also ends stdin_once."""
    name, d = peer
    _, cid = _container(d, ppods, ["sh", "-c", "cat; echo eof-seen; sleep 300"], "gone", stdin=True,
                        stdin_once=True)

    async def go() -> None:
        w = await WsAttach.open(_attach_url(d, cid, stdin=True, stdout=True, stderr=True), V4)
        await w.until(b"first\n", resend=b"first\n")
        await w.close()
    asyncio.run(go())
    deadline = time.monotonic() + 20
    log = _state(d, cid).log_path
    while b"eof-seen" not in open(log, "rb").read():
        assert time.monotonic() < deadline, open(log, "rb").read()[-400:]
        time.sleep(0.1)


def test_tty_attach_with_resize(peer, ppods):  # noqa: F811
    name, d = peer
    _, cid = _container(d, ppods, ["sh"], "term", stdin=True, tty=True)

    async def go() -> None:
        a = await SpdyAttach.open(_attach_url(d, cid, stdin=True, stdout=True, tty=True),
                                  ["stdin", "stdout", "resize"])
        await a.resize(100, 40)
        await a.until(b"40 100", resend=b"stty size\n")
        await a.send(b"tty\n")
        await a.until(b"/dev/pts/")
        await a.close()
        w = await WsAttach.open(_attach_url(d, cid, stdin=True, stdout=True, tty=True), V4)
        await w.resize(123, 45)
        await w.until(b"45 123", resend=b"stty size\n")
        await w.send(b"exit 0\n")
        await w.status()
        await w.close()
    asyncio.run(go())
    st = d.client.wait_container_state(cid, pb.CONTAINER_EXITED)
    assert st.exit_code == 0


def test_attach_stdin_to_a_container_without_stdin(peer, ppods):  # noqa: F811
    """containerd's answer: the session is served, output streams, the input is dropped (and its end
    does not end the session). Invalid combinations are INVALID_ARGUMENT before any URL is handed out."""
    name, d = peer
    _, cid = _container(d, ppods, ["sh", "-c", "while true; do echo tick; sleep 0.2; done"], "nostdin")
    with pytest.raises(grpc.RpcError) as e:
        _attach_url(d, cid, stdout=True, stderr=True, tty=True)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    async def go() -> None:
        a = await SpdyAttach.open(_attach_url(d, cid, stdin=True, stdout=True), ["stdin", "stdout"])
        await a.send(b"echo injected\n")
        await a.streams["stdin"].close()
        await a.until(b"tick\ntick\n")
        assert not a.streams["stdout"].finished.is_set()  # still attached after our stdin ended
        await a.close()
    asyncio.run(go())
    assert b"injected" not in open(_state(d, cid).log_path, "rb").read()
    assert _state(d, cid).state == pb.CONTAINER_RUNNING


def test_attach_with_stdin_survives_a_daemon_kill_9(own):
    d, pods = own
    _, cid = _container(d, pods, ["cat"], "cat", stdin=True)
    _, once = _container(d, pods, ["sh", "-c", "cat; echo eof-seen"], "once", stdin=True, stdin_once=True)
    info = pods.info(cid)
    d.kill()
    assert os.path.exists(f"/proc/{info['pid']}")
    d.start()
    pods.c = d.client

    async def go() -> None:
        a = await SpdyAttach.open(_attach_url(d, cid, stdin=True, stdout=True), ["stdin", "stdout"])
        await a.until(b"after-restart\n", resend=b"after-restart\n")
        await a.close()
        w = await WsAttach.open(_attach_url(d, once, stdin=True, stdout=True), V5)
        await w.until(b"once-more\n", resend=b"once-more\n")
        await w.close_stdin()
        await w.until(b"eof-seen\n")
        assert (await w.status())["status"] == "Success"
        await w.close()
    asyncio.run(go())
    assert d.client.wait_container_state(once, pb.CONTAINER_EXITED).exit_code == 0
    assert _state(d, cid).state == pb.CONTAINER_RUNNING

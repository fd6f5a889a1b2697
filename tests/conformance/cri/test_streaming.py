"""critest streaming.go: "Streaming" — exec, attach and port-forward over the URL the runtime returns,
spoken here with the websocket channel.k8s.io protocol (v4) both runtimes' streaming servers serve."""

import asyncio
import json

from cri.proto import api_pb2 as pb
from tests.conformance.cri import framework as fw
from tests.conformance.cri.test_networking import web_pod


def _exec(f, tty, stdin, want):
    sid, pod = f.pod_for_container()
    cid = f.create_default(sid, pod, "container-for-exec-test")
    f.start(cid)
    url = f.c.exec(cid, ["echo", "hello"], stdout=True, stderr=not tty, tty=tty, stdin=stdin)
    assert url.startswith("http") and "//" in url, "The host of url should not be empty"
    got = fw.stream(url, until=lambda g: fw.ERROR in g)
    assert got.get(fw.STDOUT, b"").decode() == want
    assert got.get(fw.STDERR, b"") == b"", "The stderr of exec should be empty"
    assert json.loads(got[fw.ERROR])["status"] == "Success"


def test_runtime_should_support_exec_with_tty_false_and_stdin_false(f):
    _exec(f, False, False, "hello\n")


def test_runtime_should_support_exec_with_tty_true_and_stdin_true(f):
    _exec(f, True, True, "hello\r\n")


def _attach_container(f) -> str:
    """createShellContainer + startContainer + createDefaultAttach: /bin/sh with stdin (stdin_once), attached
    with stdin, stdout and stderr, no terminal."""
    sid, pod = f.pod_for_container()
    cfg = f.container_config("container-for-attach-test", command=fw.SHELL_CMD, stdin=True, stdin_once=True)
    cfg.linux.SetInParent()
    cid = f.create(sid, pod, cfg)
    f.start(cid)
    return f.c.attach(cid, stdin=True, stdout=True, stderr=True)


def test_runtime_should_support_attach(f):
    """checkAttach: write `echo -n hello` with stdin held open (never closed), Eventually stdout is exactly
    "hello" — output without a newline must reach the attached client as it is written — and Consistently
    nothing else for 3 s; stderr stays empty. Over websocket (critest's UseWebsocketForAttach)."""
    url = _attach_container(f)

    async def send(ws, got):
        await asyncio.sleep(1)  # "the container should stop output when there is no input"
        await ws.send_bytes(b"\x00" + fw.ATTACH_ECHO_HELLO + b"\n")
        while got.get(fw.STDOUT, b"") != b"hello":  # noqa: ASYNC110 - Eventually hello ...
            await asyncio.sleep(0.1)
        await asyncio.sleep(3)  # ... and Consistently nothing else
        await ws.close()

    got = fw.stream(url, send, timeout=60)
    assert got.get(fw.STDOUT) == b"hello", "The stdout of attach should be hello"
    assert got.get(fw.STDERR, b"") == b"", "The stderr of attach should be empty"


def test_runtime_should_support_attach_over_spdy(f):
    """The same checkAttach over SPDY/3.1, critest's default transport."""
    url = _attach_container(f)
    got = fw.spdy_attach_echo_hello(url)
    assert got["stdout"] == b"hello", "The stdout of attach should be hello"
    assert got["stderr"] == b"", "The stderr of attach should be empty"


def test_runtime_should_support_portforward(f):
    sid, _ = web_pod(f)
    def get():  # Eventually, as checkMainPage: the server may not listen yet; each URL is single-use
        # critest speaks SPDY, which names ports per stream; over websocket the ports are fixed with
        # the URL (containerd takes them from the request, ours also from the query)
        url = f.c.port_forward(sid, [fw.WEB_PORT])
        return fw.port_forward_get(url, fw.WEB_PORT, 5)
    data = fw.eventually(get, lambda d: bool(d), 20, 1.0) or b""
    assert data.startswith(b"HTTP/1.") and b" 200 " in data.split(b"\r\n", 1)[0], data[:200]


def test_runtime_should_support_portforward_in_host_network(f):
    cfg = f.pod_config("create-PodSandbox-with-port-mapping")
    cfg.port_mappings.add(container_port=fw.HOST_NET_WEB_PORT)
    cfg.linux.security_context.namespace_options.network = pb.NODE
    sid = f.run_pod(cfg)
    cid = f.create(sid, cfg, f.container_config("container-for-host-net-portforward-test",
                                                image=fw.HOST_NET_WEBSERVER))
    f.start(cid)
    assert fw.http_get(f"http://127.0.0.1:{fw.HOST_NET_WEB_PORT}/") == 200

    def get():
        url = f.c.port_forward(sid, [fw.HOST_NET_WEB_PORT])
        return fw.port_forward_get(url, fw.HOST_NET_WEB_PORT, 5)
    data = fw.eventually(get, lambda d: bool(d), 20, 1.0) or b""
    assert data.startswith(b"HTTP/1.") and b" 200 " in data.split(b"\r\n", 1)[0], data[:200]

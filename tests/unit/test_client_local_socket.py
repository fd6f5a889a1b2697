"""The embedded components' local socket: named in their kubeconfig as a cluster extension, used by our
client when it may connect, ignored otherwise; every request still carries the component's token."""

from __future__ import annotations

import asyncio
import os
import socket

import yaml
from aiohttp import web

from kernel import unix_socket
from nodeagent.apiserver import kubeconfig
from nodeagent.client import local_socket
from nodeagent.client.rest import Client, ClientError
from nodeagent.pki import self_signed

CA = self_signed("test-ca")[0]


def _write(tmp_path, sock: str | None) -> str:
    path = tmp_path / "scheduler.kubeconfig"
    path.write_text(kubeconfig.render("https://127.0.0.1:6443", CA, "tok-1", user="system:kube-scheduler",
                                      local_socket_path=sock))
    return str(path)


def test_the_kubeconfig_keeps_its_https_server_and_names_the_socket_as_an_extension(tmp_path):
    cfg = yaml.safe_load(open(_write(tmp_path, "/run/x/apiserver.sock")))
    cluster = cfg["clusters"][0]["cluster"]
    assert cluster["server"] == "https://127.0.0.1:6443"  # kubectl and every other client: HTTPS
    assert cluster["extensions"] == [{"name": local_socket.EXTENSION,
                                      "extension": {"socket": "/run/x/apiserver.sock"}}]
    assert "extensions" not in yaml.safe_load(open(_write(tmp_path, None)))["clusters"][0]["cluster"]


def test_the_client_uses_the_socket_only_when_it_is_one_it_may_open(tmp_path):
    sock_path = str(tmp_path / "api.sock")
    kc = _write(tmp_path, sock_path)
    assert Client.from_kubeconfig(kc).unix_socket is None  # not there (server not started): HTTPS
    open(sock_path, "w").close()
    assert Client.from_kubeconfig(kc).unix_socket is None  # a plain file: HTTPS
    os.unlink(sock_path)
    s = unix_socket.bind_private(sock_path)
    try:
        c = Client.from_kubeconfig(kc)
        assert c.unix_socket == sock_path
        assert c.server == "https://127.0.0.1:6443"  # what it names stays the server's address
        assert c.with_token("other").unix_socket == sock_path
    finally:
        s.close()
        unix_socket.remove(sock_path)


def test_an_extension_without_a_path_is_not_used():
    assert local_socket.usable({"extensions": [{"name": local_socket.EXTENSION, "extension": {}}]}) is None
    assert local_socket.usable({"extensions": [{"name": "cluster_info", "extension": {"x": 1}}]}) is None
    assert local_socket.usable({}) is None


def test_requests_and_watches_over_the_socket_carry_the_token(tmp_path):
    """A real aiohttp server on the socket: the verbs, a watch stream and a Status error, each request
    with the client's (refreshable) bearer token."""
    sock_path = str(tmp_path / "api.sock")
    seen: list[tuple[str, str, str | None]] = []

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        seen.append((request.method, request.path_qs, request.headers.get("Authorization")))
        if request.query.get("watch"):
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            await resp.write(b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n')
            await resp.write_eof()
            return resp
        if request.method == "POST":
            body = await request.json()
            return web.json_response(body, status=201)
        return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound",
                                  "message": 'pods "x" not found'}, status=404)

    async def main() -> None:
        runner = web.ServerRunner(web.Server(handle))
        await runner.setup()
        sock = unix_socket.bind_private(sock_path)
        await web.SockSite(runner, sock).start()
        try:
            async with Client("https://10.0.0.1:6443", "tok-1", unix_socket=sock_path) as c:
                made = await c.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                     "metadata": {"name": "a"}}, "default")
                assert made["metadata"]["name"] == "a"
                try:
                    await c.get("pods", "x", "default")
                    raise AssertionError("a 404 must raise")
                except ClientError as e:
                    assert e.not_found and e.message == 'pods "x" not found'
                c.set_token("tok-2")
                events = [ev async for ev in c.watch("pods", "default", timeout_seconds=5)]
                assert [e["object"]["metadata"]["name"] for e in events] == ["a"]
        finally:
            await runner.cleanup()
            unix_socket.remove(sock_path)

    asyncio.run(main())
    assert [(m, a) for m, _, a in seen] == [("POST", "Bearer tok-1"), ("GET", "Bearer tok-1"),
                                           ("GET", "Bearer tok-2")]
    assert seen[2][1].startswith("/api/v1/namespaces/default/pods?watch=1")


def test_a_refused_connection_is_a_client_error(tmp_path):
    sock_path = str(tmp_path / "gone.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock_path)
    s.close()  # a socket file nobody listens on (a server killed -9)

    async def main() -> None:
        async with Client("https://10.0.0.1:6443", "t", unix_socket=sock_path) as c:
            try:
                await c.get("pods", "x", "default")
            except ClientError as e:
                assert e.code == 0 and e.reason == "ConnectionError"
            else:
                raise AssertionError("no server: the request must fail")

    asyncio.run(main())

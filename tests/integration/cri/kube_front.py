"""Just enough apiserver in front of the runtime for a real kubectl: discovery, one pod, and
pods/{exec,attach,portforward} relayed byte-for-byte to the CRI streaming URL (as a kubelet does).

The streaming URL comes from a callback (the test calls the CRI's Exec/Attach/PortForward); the
upgrade request is re-sent to it with the path swapped and then both directions are spliced.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

POD, NS, CONTAINER = "p", "default", "c"


def _pod(names: list[str]) -> dict:
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": POD, "namespace": NS, "uid": "u-1", "resourceVersion": "1"},
            "spec": {"containers": [{"name": n, "image": "busybox"} for n in names], "nodeName": "n"},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": n, "ready": True, "restartCount": 0, "image": "busybox", "imageID": "",
                 "state": {"running": {}}} for n in names]}}


def _resources() -> dict:
    def r(name, kind, verbs, namespaced=True):
        return {"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs}
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        r("pods", "Pod", ["get", "list"]), r("pods/exec", "PodExecOptions", ["create", "get"]),
        r("pods/attach", "PodAttachOptions", ["create", "get"]),
        r("pods/portforward", "PodPortForwardOptions", ["create", "get"]),
        r("namespaces", "Namespace", ["get"], False)]}


ROUTES = {
    "/api": {"kind": "APIVersions", "versions": ["v1"],
             "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    "/api/v1": _resources(),
    "/version": {"major": "1", "minor": "32", "gitVersion": "v1.32.0", "platform": "linux/amd64"},
}


class KubeFront:
    def __init__(self, stream_url: Callable[[str, dict[str, list[str]]], str]) -> None:
        self.stream_url = stream_url  # (verb, query) -> the runtime's one-time URL (blocking call)
        self.port = 0
        self.upgrades: list[tuple[str, str]] = []  # (verb, Upgrade header) of relayed requests
        self.containers = [CONTAINER]  # the pod's containers, as the pod object lists them
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def kubeconfig(self) -> str:
        return json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "t",
            "clusters": [{"name": "t", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "t", "user": {}}],
            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t", "namespace": NS}}]})

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = [tuple(x.strip() for x in line.split(":", 1)) for line in lines[1:] if ":" in line]
                hmap = {k.lower(): v for k, v in headers}
                if int(hmap.get("content-length", "0") or 0):
                    await reader.readexactly(int(hmap["content-length"]))
                u = urlsplit(target)
                verb = u.path.rsplit("/", 1)[-1]
                ours = u.path.startswith(f"/api/v1/namespaces/{NS}/pods/{POD}/")
                if ours and verb in ("exec", "attach", "portforward"):
                    await self._relay(verb, method, u, headers, reader, writer)
                    return
                body = ROUTES.get(u.path.rstrip("/") or "/")
                if u.path == f"/api/v1/namespaces/{NS}/pods/{POD}":
                    body = _pod(self.containers)
                status = "200 OK" if body is not None else "404 Not Found"
                if body is None:
                    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "NotFound", "code": 404}
                data = json.dumps(body).encode()
                response = (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                            f"Content-Length: {len(data)}\r\n\r\n")
                writer.write(response.encode() + data)
                await writer.drain()
        finally:
            writer.close()

    async def _relay(self, verb: str, method: str, u, headers, reader, writer) -> None:
        url = await asyncio.to_thread(self.stream_url, verb, parse_qs(u.query))
        t = urlsplit(url)
        self.upgrades.append((verb, dict((k.lower(), v) for k, v in headers).get("upgrade", "")))
        up_r, up_w = await asyncio.open_connection(t.hostname, t.port)
        out = [f"{method} {t.path}?{u.query} HTTP/1.1"]
        out += [f"{k}: {v}" for k, v in headers if k.lower() != "host"] + [f"Host: {t.netloc}"]
        up_w.write(("\r\n".join(out) + "\r\n\r\n").encode())

        async def splice(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while chunk := await src.read(65536):
                    dst.write(chunk)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.write_eof() if dst.can_write_eof() else dst.close()
        try:
            await asyncio.gather(splice(reader, up_w), splice(up_r, writer))
        finally:
            up_w.close()

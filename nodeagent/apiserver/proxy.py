"""pods/log, exec, attach, portforward and node proxy: forwarded to the node's kubelet API.

Upgrades are spliced to the kubelet byte for byte, except a websocket exec/attach asking for
v5.channel.k8s.io, which is translated to SPDY towards the kubelet as kube-apiserver does
(stream_translator.py).

The kubelet endpoint is the Node's status.daemonEndpoints.kubeletEndpoint.Port on its InternalIP.
Without one, the answer is a 503 Status naming the node, so kubectl prints why.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nodeagent.api.resources import builtin
from nodeagent.apiserver import errors, stream_translator

if TYPE_CHECKING:
    from nodeagent.apiserver.registry import Registry
    from nodeagent.apiserver.request import RequestInfo

NODES = builtin("", "v1", "nodes")
_KUBELET_PATH = {"log": "containerLogs", "exec": "exec", "attach": "attach", "portforward": "portForward"}
# kube-apiserver's kubelet transport: a 30 s dial and Go's 10 s TLS handshake timeout (a loaded node, or an
# emulated VM, can take seconds to answer a handshake)
DIAL_TIMEOUT = 30.0
TLS_HANDSHAKE_TIMEOUT = 10.0


def _why(e: BaseException) -> str:
    """A timeout's message is empty: say what ran out."""
    if isinstance(e, TimeoutError) or type(e).__name__.endswith("TimeoutError"):
        return str(e) or f"timed out after {DIAL_TIMEOUT:g}s"
    return str(e) or type(e).__name__


def kubelet_address(node: dict[str, Any]) -> tuple[str, int] | None:
    st = node.get("status") or {}
    port = ((st.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    addrs = {a.get("type"): a.get("address") for a in st.get("addresses") or []}
    ip = addrs.get("InternalIP") or addrs.get("Hostname")
    if not port or not ip:
        return None
    return ip, int(port)


class KubeletProxy:
    def __init__(self, ca_file: Path) -> None:
        self.ca_file = ca_file
        self._ctx: ssl.SSLContext | None = None

    async def __call__(self, registry: Registry, request: web.BaseRequest,
                       info: RequestInfo) -> web.StreamResponse:
        res, sub = info.resource, info.subresource
        if res.name == "nodes":
            node = await registry.get(res, None, info.name or "")
            path = info.proxy_path or "/"
        else:
            pod = await registry.get(res, info.namespace, info.name or "")
            node_name = (pod.get("spec") or {}).get("nodeName")
            if not node_name:
                raise errors.bad_request(f"pod {info.name} does not have a host assigned")
            node = await registry.get(NODES, None, node_name)
            container = request.query.get("container")
            if not container:
                cs = (pod.get("spec") or {}).get("containers") or []
                if len(cs) != 1 and sub in ("log", "exec", "attach"):
                    raise errors.bad_request("a container name must be specified for pod "
                                             f"{info.name}, choose one of: "
                                             f"[{' '.join(c.get('name', '') for c in cs)}]")
                container = cs[0]["name"] if cs else ""
            if sub == "proxy":
                raise errors.service_unavailable("pod proxy is not supported by this apiserver")
            path = f"/{_KUBELET_PATH[sub]}/{info.namespace}/{info.name}"
            if sub != "portforward":
                path += f"/{container}"
        addr = kubelet_address(node)
        if addr is None:
            raise errors.service_unavailable(f'no kubelet API serves node "{node["metadata"]["name"]}" '
                                             "(its status has no daemonEndpoints.kubeletEndpoint.Port and "
                                             "InternalIP)")
        if request.headers.get("Upgrade"):
            if sub in ("exec", "attach") and stream_translator.wants_translation(request):
                try:
                    return await stream_translator.translate(request, addr, path, self.client_ssl(),
                                                             DIAL_TIMEOUT, TLS_HANDSHAKE_TIMEOUT)
                except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as e:
                    raise errors.service_unavailable(f"error dialing kubelet at {addr[0]}:{addr[1]}: "
                                                     f"{_why(e)}") from None
            return await self._upgrade(request, addr, path)
        return await self._stream(request, addr, path)

    def client_ssl(self) -> ssl.SSLContext:
        """TLS to a kubelet: present the CA-signed apiserver-kubelet-client cert (the kubelet authenticates
        us by it); like kube-apiserver without --kubelet-certificate-authority, the kubelet's serving cert
        is not verified (agents that joined without the CA key serve a self-signed one)."""
        if self._ctx is None:
            from nodeagent.apiserver.pki import ensure_kubelet_client_cert

            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            crt, key = ensure_kubelet_client_cert(self.ca_file.parent)
            ctx.load_cert_chain(str(crt), str(key))
            self._ctx = ctx
        return self._ctx

    async def _stream(self, request: web.BaseRequest, addr: tuple[str, int], path: str) -> web.StreamResponse:
        import aiohttp

        url = f"https://{addr[0]}:{addr[1]}{path}"

        async def exchange() -> web.StreamResponse:
            timeout = aiohttp.ClientTimeout(total=None, connect=DIAL_TIMEOUT)
            async with aiohttp.ClientSession(timeout=timeout) as s, \
                    s.request(request.method, url, params=request.query, ssl=self.client_ssl()) as up:
                content_type = up.headers.get("Content-Type", "text/plain")
                resp = web.StreamResponse(status=up.status, headers={"Content-Type": content_type})
                await resp.prepare(request)
                async for chunk in up.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
                return resp

        # A follow (`logs -f`) of a silent container sends nothing for a long time, so a client that went
        # away is only noticed by looking: then the kubelet connection is dropped with it.
        task = asyncio.ensure_future(exchange())
        while not (await asyncio.wait({task}, timeout=1.0))[0]:
            if request.transport is None or request.transport.is_closing():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError, OSError):
                    await task
                return web.Response(status=499)  # nobody is there to read it
        try:
            return task.result()
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise errors.service_unavailable(f"error dialing kubelet at {addr[0]}:{addr[1]}: "
                                             f"{_why(e)}") from None

    async def _upgrade(self, request: web.BaseRequest, addr: tuple[str, int],
                       path: str) -> web.StreamResponse:
        """Splice an Upgrade (SPDY or websocket) connection to the kubelet byte for byte."""
        try:
            async with asyncio.timeout(DIAL_TIMEOUT):
                r, w = await asyncio.open_connection(addr[0], addr[1], ssl=self.client_ssl(),
                                                     ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT)
        except (OSError, TimeoutError) as e:
            raise errors.service_unavailable(f"error dialing kubelet at {addr[0]}:{addr[1]}: "
                                             f"{_why(e)}") from None
        qs = request.rel_url.raw_query_string  # still percent-encoded: it goes on the request line as is
        lines = [f"{request.method} {path}{'?' + qs if qs else ''} HTTP/1.1", f"Host: {addr[0]}:{addr[1]}"]
        for k, v in request.headers.items():
            if k.lower() not in ("host", "authorization"):
                lines.append(f"{k}: {v}")
        w.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await w.drain()
        head = await r.readuntil(b"\r\n\r\n")
        transport = request.transport
        protocol = request.protocol
        if transport is None:
            w.close()
            raise errors.service_unavailable("client connection closed")

        class _Feed:
            def feed_data(self, data: bytes, size: int = 0) -> tuple[bool, bytes]:
                w.write(data)
                return False, b""

            def feed_eof(self) -> None:
                w.close()

        protocol.set_parser(_Feed())  # type: ignore[arg-type]  # any parser with feed_data/feed_eof works
        transport.write(head)
        resp = web.StreamResponse(status=101)
        resp._eof_sent = True  # we wrote the upstream's status line ourselves
        try:
            while True:
                data = await r.read(65536)
                if not data:
                    break
                transport.write(data)
        finally:
            w.close()
            transport.close()
        return resp

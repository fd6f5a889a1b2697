"""Relay an upgraded streaming request (exec, attach, portforward) to the runtime's streaming URL.

The kubelet does what its UpgradeAwareHandler does with a CRI streaming URL: send the client's request
(method, Upgrade/Connection/Sec-WebSocket-*/X-Stream-Protocol-Version and the other headers) to the
runtime's URL, hand the runtime's answer back unchanged, then copy bytes both ways until either side
closes. Nothing here knows websocket or SPDY framing, so whatever the runtime speaks reaches the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from urllib.parse import urlsplit

from aiohttp import web

HIGH_WATER = 1 << 20
# hop-by-hop or per-connection headers we set ourselves; everything else goes through as sent
_DROP = {"host", "authorization", "content-length", "transfer-encoding", "x-forwarded-for",
         "x-forwarded-proto"}


def upstream_request(request: web.Request, url: str, extra_query: str = "") -> tuple[str, int, bool, bytes]:
    """(host, port, tls, request head bytes) for the runtime's URL, carrying the client's headers."""
    u = urlsplit(url)
    tls = u.scheme in ("https", "wss")
    port = u.port or (443 if tls else 80)
    query = "&".join(q for q in (u.query, extra_query) if q)
    target = (u.path or "/") + (f"?{query}" if query else "")
    lines = [f"{request.method} {target} HTTP/1.1", f"Host: {u.netloc}"]
    for k, v in request.headers.items():
        if k.lower() not in _DROP:
            lines.append(f"{k}: {v}")
    return u.hostname or "127.0.0.1", port, tls, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def relay(request: web.Request, url: str, extra_query: str = "") -> web.StreamResponse:
    """Splice the client's connection to the runtime's streaming URL; returns once both sides are done."""
    host, port, tls, head = upstream_request(request, url, extra_query)
    ctx = None
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # the runtime's streaming URL is local and one-time
    try:
        async with asyncio.timeout(10):
            r, w = await asyncio.open_connection(host, port, ssl=ctx)
    except (OSError, TimeoutError) as e:
        raise web.HTTPBadGateway(text=f"error dialing the runtime's streaming server at {host}:{port}: {e}") \
            from None
    if request.transport is None:
        w.close()
        raise web.HTTPServiceUnavailable(text="client connection closed")
    transport: asyncio.Transport = request.transport
    protocol = request.protocol
    w.write(head)
    loop = asyncio.get_running_loop()
    resumer: list[asyncio.Task] = []

    async def _resume_after_drain() -> None:
        with contextlib.suppress(Exception):
            await w.drain()
        if not transport.is_closing():
            transport.resume_reading()

    class _ToRuntime:
        """Takes the client's bytes (the HTTP parser is done with this connection) to the runtime."""

        def feed_data(self, data: bytes, size: int = 0) -> tuple[bool, bytes]:
            if w.transport.is_closing():
                return False, b""
            w.write(data)
            if w.transport.get_write_buffer_size() > HIGH_WATER:
                transport.pause_reading()
                resumer.append(loop.create_task(_resume_after_drain()))
            return False, b""

        def feed_eof(self) -> None:
            if w.can_write_eof() and not w.transport.is_closing():
                with contextlib.suppress(OSError):
                    w.write_eof()
            else:
                w.close()

    protocol.set_parser(_ToRuntime())  # type: ignore[arg-type]  # any parser with feed_data/feed_eof works
    resp = web.StreamResponse(status=101)
    resp._eof_sent = True  # the runtime's status line and headers are written as they came
    try:
        while True:
            data = await r.read(65536)
            if not data or transport.is_closing():
                break
            transport.write(data)
            await protocol._drain_helper()  # waits only while the client is slow
    except (ConnectionError, OSError):
        pass
    finally:
        for t in resumer:
            t.cancel()
        w.close()
        transport.close()
    return resp

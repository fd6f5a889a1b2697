"""kube-apiserver's stream translation (KEP-4006, TranslateStreamCloseWebsocketRequests): a client's websocket
exec or attach asking for v5.channel.k8s.io is answered here, and carried on to the kubelet over SPDY/3.1
(v4.channel.k8s.io), so v5 — above all the client closing its stdin (CLOSE on channel 255) — works whatever
the node's runtime speaks (containerd 1.6's streaming server knows websocket only up to v4).

One task per direction: the client's frames become DATA on the SPDY streams (stdin, resize; CLOSE 0 is
the stdin stream's FIN); the kubelet's stdout/stderr DATA become channel 1/2 frames as they arrive, and the
error stream's Status, once complete, channel 3, after which the websocket closes. A kubelet that refuses
the upgrade has its answer handed back before the client's websocket is accepted. The SPDY framing and
header compression are cri.server.spdy's (the one SPDY codec of the tree).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import struct
from typing import Any

from aiohttp import WSMsgType, web

from cri.server import spdy

log = logging.getLogger("nodeagent.apiserver.streams")

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
SUCCESS = json.dumps({"metadata": {}, "status": "Success"}).encode()


def wants_translation(request: web.BaseRequest) -> bool:
    """A websocket upgrade offering v5.channel.k8s.io (kube-apiserver translates exactly these)."""
    if request.headers.get("Upgrade", "").lower() != "websocket":
        return False
    offered = {p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")}
    return V5 in offered


def _flag(request: web.BaseRequest, name: str) -> bool:
    return request.query.get(name, "").lower() in ("true", "1")


def _syn_stream(stream_id: int, header_block: bytes) -> bytes:
    return spdy.control(spdy.SYN_STREAM, 0, struct.pack(">IIH", stream_id, 0, 0) + header_block)


async def _kubelet_upgrade(addr: tuple[str, int], target: str, ctx: ssl.SSLContext, dial_timeout: float,
                           handshake_timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter,
                                                              int, bytes, dict[str, str]]:
    """A SPDY/3.1 upgrade of `target` on the kubelet: (reader, writer, status, body, headers); the body only
    when the kubelet refused (status other than 101)."""
    async with asyncio.timeout(dial_timeout):
        r, w = await asyncio.open_connection(addr[0], addr[1], ssl=ctx,
                                             ssl_handshake_timeout=handshake_timeout)
    w.write((f"POST {target} HTTP/1.1\r\nHost: {addr[0]}:{addr[1]}\r\nConnection: Upgrade\r\n"
             f"Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {V4}\r\nContent-Length: 0\r\n\r\n").encode())
    await w.drain()
    head = (await r.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split(" ", 2)[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
    body = b""
    if status != 101:
        with contextlib.suppress(asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            async with asyncio.timeout(10):
                n = int(headers.get("content-length", "-1"))
                body = await (r.readexactly(n) if n >= 0 else r.read())
        w.close()
    return r, w, status, body, headers


async def translate(request: web.BaseRequest, addr: tuple[str, int], path: str, ctx: ssl.SSLContext,
                    dial_timeout: float, handshake_timeout: float) -> web.StreamResponse:
    """Serve the client's v5 websocket, carrying the session to the kubelet over SPDY (raises OSError or
    TimeoutError when the kubelet cannot be reached: the caller answers 503)."""
    qs = request.rel_url.raw_query_string
    r, w, status, body, headers = await _kubelet_upgrade(addr, f"{path}?{qs}" if qs else path, ctx,
                                                         dial_timeout, handshake_timeout)
    if status != 101:  # the kubelet's refusal (a Status, usually), as it gave it
        return web.Response(status=status, body=body,
                            headers={"Content-Type": headers.get("content-type", "text/plain")})
    tty = _flag(request, "tty")
    kinds = ["error"] + [k for k in ("stdin", "stdout", "stderr") if _flag(request, k) and not
                         (k == "stderr" and tty)] + (["resize"] if tty else [])
    ids = {kind: 2 * i + 1 for i, kind in enumerate(kinds)}
    channel = {ids[k]: ch for k, ch in (("stdout", STDOUT), ("stderr", STDERR)) if k in ids}
    headers_out = spdy.HeaderCompressor()
    for kind in kinds:
        w.write(_syn_stream(ids[kind], headers_out.compress({"streamtype": kind})))
    ws = web.WebSocketResponse(protocols=(V5,), max_msg_size=0)
    try:
        await ws.prepare(request)
        lock = asyncio.Lock()

        async def send(ch: int, data: bytes) -> None:
            async with lock:
                if not ws.closed:
                    await ws.send_bytes(bytes([ch]) + data)

        down = asyncio.ensure_future(_from_kubelet(r, w, ids["error"], channel, send))
        up = asyncio.ensure_future(_from_client(ws, w, ids))
        try:
            await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
            if down.done() and down.exception() is None:
                await send(ERROR, down.result())
            elif down.done():
                log.info("%s: %s", path, down.exception())
        finally:
            for t in (down, up):
                t.cancel()
            await asyncio.gather(down, up, return_exceptions=True)
    finally:
        w.close()
        if not ws.closed:
            await ws.close()
    return ws


async def _from_kubelet(r: asyncio.StreamReader, w: asyncio.StreamWriter, error_id: int,
                        channel: dict[int, int], send: Any) -> bytes:
    """Output streams to the client as they come; returns the error stream's Status once it is finished
    (the kubelet writes it when the command has ended), or a Success when it wrote none."""
    frames = spdy.FrameReader()
    headers_in = spdy.HeaderDecompressor()
    status = b""
    while True:
        data = await r.read(65536)
        if not data:
            raise ConnectionError("the kubelet closed the stream session before the command's status")
        for f in frames.feed(data):
            if isinstance(f, spdy.DataFrame):
                if f.stream_id == error_id:
                    status += f.data
                    if f.flags & spdy.FLAG_FIN:
                        return status or SUCCESS
                elif f.data and f.stream_id in channel:
                    await send(channel[f.stream_id], f.data)
            elif f.type in (spdy.SYN_REPLY, spdy.HEADERS):
                headers_in.decompress(f.payload[4:])  # keeps the peer's zlib stream in step
            elif f.type == spdy.PING:
                w.write(spdy.control(spdy.PING, 0, f.payload))
            elif f.type == spdy.GOAWAY or (f.type == spdy.RST_STREAM and
                                           struct.unpack_from(">I", f.payload)[0] & 0x7FFFFFFF == error_id):
                return status or SUCCESS


async def _from_client(ws: web.WebSocketResponse, w: asyncio.StreamWriter, ids: dict[str, int]) -> None:
    """The client's stdin and terminal sizes onto their SPDY streams; CLOSE 0 half-closes stdin (input after
    that is dropped: the stream is finished)."""
    stdin_open = "stdin" in ids
    async for msg in ws:
        if msg.type == WSMsgType.BINARY:
            frame = bytes(msg.data)
        elif msg.type == WSMsgType.TEXT:
            frame = str(msg.data).encode()  # text frames are data too, as kube-apiserver reads them
        else:
            continue
        if not frame:
            continue
        ch, data = frame[0], frame[1:]
        if ch == STDIN and stdin_open and data:
            for i in range(0, len(data), spdy.DATA_CHUNK):
                w.write(spdy.data_frame(ids["stdin"], 0, data[i:i + spdy.DATA_CHUNK]))
        elif ch == RESIZE and "resize" in ids and data:
            w.write(spdy.data_frame(ids["resize"], 0, data))
        elif ch == CLOSE and data[:1] == bytes([STDIN]) and stdin_open:
            w.write(spdy.data_frame(ids["stdin"], spdy.FLAG_FIN, b""))
            stdin_open = False
        await w.drain()

"""Exec, Attach and PortForward over SPDY/3.1: the protocol kubectl (1.20-1.29 exec/attach, every
version for port-forward) and kubelet proxies speak, on the same one-time URLs as the websockets.

Upgrade: `Connection: Upgrade`, `Upgrade: SPDY/3.1` and one or more `X-Stream-Protocol-Version`
offers; we answer 101 with the first offer we serve (exec/attach: v4.channel.k8s.io … channel.k8s.io;
port-forward: portforward.k8s.io), or 403 listing ours in `X-Accepted-Stream-Protocol-Versions`.
Then the client opens streams, each named by its `streamType` header:

- exec/attach: error, stdin, stdout, stderr, resize (tty, v3+). The command starts once every
  expected stream is there; output goes out on stdout/stderr (FIN at EOF); the error stream carries
  a metav1.Status JSON (v4: Success, or Failure/NonZeroExitCode with causes[ExitCode]) or, before v4,
  the failure text only; resize carries a sequence of {"Width","Height"} JSON objects.
- port-forward: per request a pair (`streamType` error/data, `port`, `requestID`); bytes of the data
  stream are relayed to 127.0.0.1:port in the pod's netns, a failure is written to the error stream.

kubectl >= 1.31 may tunnel the same SPDY bytes through a websocket (subprotocol
`SPDY/3.1+portforward.k8s.io`, binary messages, no channel byte): `accept_tunnel` serves that.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import socket
import struct
import termios
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import WSMsgType, web

from cri.server.fdio import write_fd
from cri.server.spdy import Session, Stream

log = logging.getLogger("nodeagent.cri.stream.spdy")

PROTOCOL_HEADER = "X-Stream-Protocol-Version"
ACCEPTED_HEADER = "X-Accepted-Stream-Protocol-Versions"
EXEC_SPDY_PROTOCOLS = ("v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io")
PORTFORWARD_SPDY_PROTOCOLS = ("portforward.k8s.io",)
TUNNEL_PREFIX = "SPDY/3.1+"
STREAM_CREATION_TIMEOUT = 30.0  # kubelet's default wait for the client's streams
READ_HIGH_WATER = 1 << 20  # pause reading the socket when this much is received and unread


def is_spdy_upgrade(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").strip().lower() == "spdy/3.1"


def wants_tunnel(request: web.Request) -> bool:
    """A websocket upgrade offering SPDY-over-websocket (kubectl >= 1.31 port-forward)."""
    if request.headers.get("Upgrade", "").strip().lower() != "websocket":
        return False
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
    return any(p.startswith(TUNNEL_PREFIX) for p in offered)


def negotiate(request: web.Request, served: tuple[str, ...], default: str) -> str | None:
    """The first protocol the client offers that we serve; `default` when it offers none (legacy)."""
    offered = [p.strip() for v in request.headers.getall(PROTOCOL_HEADER, []) for p in v.split(",")
               if p.strip()]
    if not offered:
        return default
    return next((p for p in offered if p in served), None)


class _Feeder:
    """Takes aiohttp's raw bytes after the 101 (it calls this as a payload parser)."""

    def __init__(self, session: Session, transport: asyncio.Transport) -> None:
        self.session = session
        self.transport = transport
        self.paused = False
        session.on_read = self._maybe_resume

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.session.feed(data)
        if self.session.buffered > READ_HIGH_WATER and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        return False, b""

    def feed_eof(self) -> None:
        self.session.feed_eof()

    def _maybe_resume(self) -> None:
        if self.paused and self.session.buffered < READ_HIGH_WATER // 2:
            self.paused = False
            with contextlib.suppress(RuntimeError):
                self.transport.resume_reading()


Accepted = tuple[Session, str, web.StreamResponse]  # the session, the protocol chosen, the 101 response


async def accept_spdy(request: web.Request, served: tuple[str, ...], default: str,
                      on_stream: Callable[[Stream], None]) -> Accepted | web.Response:
    """Upgrade the request to SPDY/3.1; an HTTP error response when the request does not qualify."""
    connection = [t.strip().lower() for t in request.headers.get("Connection", "").split(",")]
    if "upgrade" not in connection:
        return web.Response(status=400, text="unable to upgrade: missing upgrade headers in request")
    chosen = negotiate(request, served, default)
    if chosen is None:
        refused = web.Response(status=403, text="unable to upgrade: unable to negotiate protocol: "
                                                f"server accepts {list(served)}")
        for p in served:
            refused.headers.add(ACCEPTED_HEADER, p)
        return refused
    transport = request.transport
    if transport is None:
        raise ConnectionResetError("connection lost before the upgrade")
    protocol = request.protocol

    async def send(data: bytes) -> None:
        if transport.is_closing():
            raise ConnectionResetError("connection closed")
        transport.write(data)
        await protocol._drain_helper()  # aiohttp's write backpressure (what its websocket writer uses)

    session = Session(send, on_stream)
    # Before the 101: no byte can be parsed as HTTP. aiohttp annotates the parser as its WebSocketReader.
    protocol.set_parser(_Feeder(session, transport))  # type: ignore[arg-type]  # it calls feed_data/eof only
    resp = web.StreamResponse(status=101, headers={"Connection": "Upgrade", "Upgrade": "SPDY/3.1",
                                                   PROTOCOL_HEADER: chosen})
    resp.force_close()
    await resp.prepare(request)
    session.start()
    return session, chosen, resp


async def accept_tunnel(request: web.Request, served: tuple[str, ...],
                        on_stream: Callable[[Stream], None]) -> tuple[Session, str, web.WebSocketResponse]:
    """SPDY frames inside websocket binary messages (client-go's TunnelingConnection)."""
    ws = web.WebSocketResponse(protocols=[TUNNEL_PREFIX + p for p in served], max_msg_size=0)
    await ws.prepare(request)
    chosen = (ws.ws_protocol or TUNNEL_PREFIX + served[0]).removeprefix(TUNNEL_PREFIX)
    session = Session(ws.send_bytes, on_stream)
    resumed = asyncio.Event()
    resumed.set()

    def on_read() -> None:
        if session.buffered < READ_HIGH_WATER // 2:
            resumed.set()
    session.on_read = on_read
    session.start()

    async def reader() -> None:
        try:
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    session.feed(msg.data)
                    if session.buffered > READ_HIGH_WATER:
                        resumed.clear()
                        await resumed.wait()
                elif msg.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
                    break
        finally:
            session.feed_eof()

    task = asyncio.create_task(reader(), name="spdy-tunnel-reader")

    async def end_websocket() -> None:  # closing the session also ends the websocket
        if not ws.closed:
            await ws.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    session.after_close = end_websocket
    return session, chosen, ws


# -- remotecommand (exec, attach) ------------------------------------------------------------------
class RemoteCommand:
    """The streams of one exec/attach session, as the negotiated channel.k8s.io version uses them."""

    def __init__(self, session: Session, version: str, streams: dict[str, Stream]) -> None:
        self.session = session
        self.version = version
        self.streams = streams

    @staticmethod
    async def wait_for_streams(queue: asyncio.Queue[Stream], version: str, req: dict[str, Any],
                               within: float = STREAM_CREATION_TIMEOUT) -> dict[str, Stream]:
        """Every stream the client must open (kubelet's count: error + the asked stdio + resize with a
        tty)."""
        expected = {"error"}
        for name in ("stdin", "stdout", "stderr"):
            if req.get(name):
                expected.add(name)
        if req.get("tty") and version in ("v4.channel.k8s.io", "v3.channel.k8s.io"):
            expected.add("resize")
        got: dict[str, Stream] = {}
        async with asyncio.timeout(within):
            while not expected <= got.keys():
                s = await queue.get()
                kind = s.header("streamtype")
                if kind in ("error", "stdin", "stdout", "stderr", "resize"):
                    got[kind] = s
                else:
                    log.warning("unexpected stream type %r", kind)
        return got

    async def write_status(self, status_json: bytes, failure_text: str | None) -> None:
        """v4: the Status JSON; older versions: the failure message only, nothing on success."""
        err = self.streams.get("error")
        if err is None:
            return
        with contextlib.suppress(ConnectionError):
            if self.version == "v4.channel.k8s.io":
                await err.write(status_json)
            elif failure_text:
                await err.write(failure_text.encode())
            await err.close()

    async def send(self, name: str, data: bytes) -> None:
        s = self.streams.get(name)
        if s is not None and data:
            with contextlib.suppress(ConnectionError):
                await s.write(data)

    async def close_output(self) -> None:
        for name in ("stdout", "stderr"):
            s = self.streams.get(name)
            if s is not None:
                with contextlib.suppress(ConnectionError):
                    await s.close()


async def pump_stdin(stream: Stream, h: Any) -> None:
    """Client stdin into the command; its FIN closes the command's stdin (not a terminal's)."""
    while True:
        data = await stream.read()
        if not data:
            break
        if h.stdin is None:
            continue
        try:
            await write_fd(h.stdin, data)
        except OSError:
            return
    if h.stdin is not None and not h.tty:
        with contextlib.suppress(OSError):
            os.close(h.stdin)
        h.stdin = None


async def pump_resize(stream: Stream, h: Any) -> None:
    """Apply a resize stream to an exec's terminal."""
    async for width, height in read_sizes(stream):
        if h.tty:
            with contextlib.suppress(OSError):
                fcntl.ioctl(h.stdout, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))


async def read_sizes(stream: Stream) -> AsyncIterator[tuple[int, int]]:
    """A JSON stream of terminal sizes (Go's json.Encoder: one object per line) as (width, height)."""
    decoder = json.JSONDecoder()
    buf = ""
    while True:
        data = await stream.read()
        if not data:
            return
        buf += data.decode(errors="replace")
        while True:
            buf = buf.lstrip()
            if not buf:
                break
            try:
                size, end = decoder.raw_decode(buf)
            except json.JSONDecodeError:
                break  # wait for the rest of the object
            buf = buf[end:]
            if isinstance(size, dict):
                with contextlib.suppress(TypeError, ValueError):
                    yield int(size.get("Width", 80)), int(size.get("Height", 24))


# -- port forward ----------------------------------------------------------------------------------
class PortForwarder:
    """Pairs the client's error/data streams by requestID and relays each pair to a pod port."""

    def __init__(self, session: Session, connect: Callable[[int], Awaitable[socket.socket]],
                 timeout: float = STREAM_CREATION_TIMEOUT) -> None:
        self.session = session
        self.connect = connect
        self.timeout = timeout
        self.pairs: dict[str, dict[str, Stream]] = {}
        self.tasks: set[asyncio.Task] = set()
        self.sockets: set[socket.socket] = set()

    def on_stream(self, s: Stream) -> None:
        kind = s.header("streamtype")
        rid = s.header("requestid")
        if not rid:  # clients before requestID: derive it from the stream ids as kubelet does
            rid = str(s.id if kind == "error" else s.id - 2)
        if kind not in ("error", "data"):
            s.abort()
            return
        pair = self.pairs.setdefault(rid, {})
        if kind in pair:
            s.abort()
            return
        pair[kind] = s
        if len(pair) == 2:
            del self.pairs[rid]
            self._spawn(self._forward(pair["error"], pair["data"]))
        elif len(pair) == 1:
            self._spawn(self._expire(rid))

    def _spawn(self, coro) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)

    async def _expire(self, rid: str) -> None:
        await asyncio.sleep(self.timeout)
        pair = self.pairs.pop(rid, None)
        if pair:
            err = pair.get("error")
            with contextlib.suppress(ConnectionError):
                if err is not None:
                    await err.write(
                        f"timed out waiting for the data and error streams of request {rid}".encode())
                for s in pair.values():
                    await s.close()

    async def _forward(self, err: Stream, data: Stream) -> None:
        loop = asyncio.get_running_loop()
        try:
            port = int(data.header("port"))
            if not 0 < port < 65536:
                raise ValueError(port)
        except ValueError:
            await self._fail(err, data, f"invalid port {data.header('port')!r}")
            return
        try:
            sock = await self.connect(port)
        except OSError as e:
            await self._fail(err, data, f"failed to connect to localhost:{port} in the pod: {e}")
            return
        self.sockets.add(sock)
        sock.setblocking(False)

        async def upstream() -> None:  # client → pod
            while True:
                chunk = await data.read()
                if not chunk:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_WR)
                    return
                await loop.sock_sendall(sock, chunk)

        async def downstream() -> None:  # pod → client
            while True:
                chunk = await loop.sock_recv(sock, 65536)
                if not chunk:
                    return
                await data.write(chunk)

        try:
            up = asyncio.create_task(upstream())
            try:
                await downstream()
            finally:
                up.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError, ConnectionError):
                    await up
        except (OSError, ConnectionError) as e:
            with contextlib.suppress(ConnectionError):
                await err.write(f"error forwarding port {port}: {e}".encode())
        finally:
            sock.close()
            self.sockets.discard(sock)
            with contextlib.suppress(ConnectionError):
                await data.close()
                await err.close()

    async def _fail(self, err: Stream, data: Stream, message: str) -> None:
        with contextlib.suppress(ConnectionError):
            await err.write(message.encode())
            await err.close()
            await data.close()

    async def close(self) -> None:
        for t in list(self.tasks):
            t.cancel()
        for t in list(self.tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for sock in list(self.sockets):
            sock.close()
        self.sockets.clear()

"""A compact SPDY/3.1 client for tests, written apart from cri/server/spdy.py (own framing and zlib).

It does what client-go's spdystream side does: HTTP upgrade (or a websocket carrying SPDY bytes, as
kubectl >= 1.31 port-forward), odd stream ids, SYN_STREAM with a zlib-compressed header block (one
compressor for the connection), DATA with FIN to half-close, answers our PINGs' echoes, and also
does flow control (WINDOW_UPDATE for what it reads; waits on the server's windows) so the server's
handling of both is exercised.

The raw connection is a plain non-blocking socket, not asyncio streams: a server ends a session with
its last frames, GOAWAY and a close, and our WINDOW_UPDATE for those last frames can then meet a reset
socket. An asyncio transport that fails a write drops what it received and has not handed on yet (the
GOAWAY); a socket still gives every byte the server sent before its close, then EOF or the reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import zlib
from urllib.parse import urlsplit

import aiohttp

_NAMES = [
    "options", "head", "post", "put", "delete", "trace", "accept", "accept-charset", "accept-encoding",
    "accept-language", "accept-ranges", "age", "allow", "authorization", "cache-control", "connection",
    "content-base", "content-encoding", "content-language", "content-length", "content-location",
    "content-md5", "content-range", "content-type", "date", "etag", "expect", "expires", "from", "host",
    "if-match", "if-modified-since", "if-none-match", "if-range", "if-unmodified-since", "last-modified",
    "location", "max-forwards", "pragma", "proxy-authenticate", "proxy-authorization", "range", "referer",
    "retry-after", "server", "te", "trailer", "transfer-encoding", "upgrade", "user-agent", "vary", "via",
    "warning", "www-authenticate", "method", "get", "status", "200 OK", "version", "HTTP/1.1", "url",
    "public", "set-cookie", "keep-alive", "origin",
]
_RAW = ("100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
        "203 Non-Authoritative Information" "204 No Content" "301 Moved Permanently" "400 Bad Request"
        "401 Unauthorized" "403 Forbidden" "404 Not Found" "500 Internal Server Error" "501 Not Implemented"
        "503 Service Unavailable" "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 "
        "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT" "chunked,text/html,image/png,image/jpg,image/gif,"
        "application/xml,application/xhtml+xml,text/plain,text/javascript," "public" "private" "max-age="
        "gzip,deflate,sdch" "charset=utf-8" "charset=iso-8859-1,utf-,*,enq=0.")
SPDY3_DICT = b"".join(len(n).to_bytes(4, "big") + n.encode("ascii") for n in _NAMES) + _RAW.encode("ascii")
WINDOW = 65536


def frame_control(kind: int, flags: int, body: bytes) -> bytes:
    return bytes([0x80, 3]) + kind.to_bytes(2, "big") + bytes([flags]) + len(body).to_bytes(3, "big") + body


def frame_data(sid: int, flags: int, body: bytes) -> bytes:
    return sid.to_bytes(4, "big") + bytes([flags]) + len(body).to_bytes(3, "big") + body


def name_value_block(headers: dict[str, str]) -> bytes:
    out = len(headers).to_bytes(4, "big")
    for k, v in headers.items():
        out += len(k).to_bytes(4, "big") + k.encode() + len(v.encode()).to_bytes(4, "big") + v.encode()
    return out


def parse_name_value_block(raw: bytes) -> dict[str, str]:
    n = int.from_bytes(raw[:4], "big")
    pos, out = 4, {}
    for _ in range(n):
        ln = int.from_bytes(raw[pos:pos + 4], "big")
        k = raw[pos + 4:pos + 4 + ln].decode()
        pos += 4 + ln
        ln = int.from_bytes(raw[pos:pos + 4], "big")
        out[k] = raw[pos + 4:pos + 4 + ln].decode()
        pos += 4 + ln
    return out


class ClientStream:
    def __init__(self, conn: SpdyClient, sid: int, headers: dict[str, str]) -> None:
        self.conn, self.id, self.headers = conn, sid, headers
        self.replied = asyncio.Event()
        self.finished = asyncio.Event()  # the server's FIN (or RST)
        self.reset_status: int | None = None
        self.data = bytearray()
        self.send_window = WINDOW
        self._more = asyncio.Event()

    async def write(self, payload: bytes) -> None:
        while payload:
            while min(self.send_window, self.conn.send_window) <= 0:
                self._more.clear()
                await self._more.wait()
            n = min(len(payload), self.send_window, self.conn.send_window, 16384)
            self.send_window -= n
            self.conn.send_window -= n
            await self.conn._write(frame_data(self.id, 0, payload[:n]))
            payload = payload[n:]

    async def close(self) -> None:
        await self.conn._write(frame_data(self.id, 1, b""))

    async def read_all(self, wait_s: float = 30) -> bytes:
        await asyncio.wait_for(self.finished.wait(), wait_s)
        return bytes(self.data)

    async def read_until(self, marker: bytes, wait_s: float = 30) -> bytes:
        async def wait():
            while marker not in self.data and not self.finished.is_set():
                self._more.clear()
                await self._more.wait()
        await asyncio.wait_for(wait(), wait_s)
        return bytes(self.data)


class SpdyClient:
    def __init__(self) -> None:
        self.status = 0
        self.response_headers: dict[str, list[str]] = {}
        self.streams: dict[int, ClientStream] = {}
        self.next_id = 1
        self.send_window = WINDOW
        self.goaway = asyncio.Event()
        self.closed = asyncio.Event()
        self.pongs: list[int] = []
        self.seen: list[int] = []  # control frame types received, in order
        self._deflate = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, SPDY3_DICT)
        self._inflate = zlib.decompressobj(15, SPDY3_DICT)
        self._buf = b""
        self._lock = asyncio.Lock()
        self._sock: socket.socket | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._http: aiohttp.ClientSession | None = None
        self._task: asyncio.Task | None = None

    # -- connecting ----------------------------------------------------------------------------------
    @classmethod
    async def upgrade(cls, url: str, protocols: list[str], method: str = "POST") -> SpdyClient:
        """A raw HTTP/1.1 upgrade to SPDY/3.1; a non-101 answer leaves status/headers set and no session."""
        c = cls()
        u = urlsplit(url)
        loop = asyncio.get_running_loop()
        family = socket.AF_INET6 if ":" in (u.hostname or "") else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, (u.hostname, u.port))
            lines = [f"{method} {u.path}{'?' + u.query if u.query else ''} HTTP/1.1", f"Host: {u.netloc}",
                     "Connection: Upgrade", "Upgrade: SPDY/3.1", "Content-Length: 0"]
            lines += [f"X-Stream-Protocol-Version: {p}" for p in protocols]
            await loop.sock_sendall(sock, ("\r\n".join(lines) + "\r\n\r\n").encode())
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = await loop.sock_recv(sock, 65536)
                if not chunk:
                    raise ConnectionError(f"the server closed the connection before its answer: {buf!r}")
                buf += chunk
        except BaseException:
            sock.close()
            raise
        head, early = buf.split(b"\r\n\r\n", 1)
        first, *rest = head.decode().split("\r\n")
        c.status = int(first.split()[1])
        for line in rest:
            if ":" in line:
                k, v = line.split(":", 1)
                c.response_headers.setdefault(k.strip().lower(), []).append(v.strip())
        if c.status != 101:
            sock.close()
            return c
        c._sock = sock
        c._task = asyncio.create_task(c._read_socket(early))
        return c

    @classmethod
    async def tunnel(cls, url: str, protocol: str) -> SpdyClient:
        """SPDY inside websocket binary messages (subprotocol SPDY/3.1+<protocol>)."""
        c = cls()
        c._http = aiohttp.ClientSession()
        c._ws = ws = await c._http.ws_connect(url, protocols=["SPDY/3.1+" + protocol])
        c.status = 101
        c.response_headers["sec-websocket-protocol"] = [ws.protocol or ""]
        c._task = asyncio.create_task(c._read_ws())
        return c

    async def _write(self, data: bytes) -> None:
        async with self._lock:
            await self._send(data)

    async def _send(self, data: bytes) -> None:
        """One frame (or several) on the connection; the caller holds the lock."""
        if self._ws is not None:
            await self._ws.send_bytes(data)
        elif self._sock is None or self._sock.fileno() < 0:
            raise ConnectionResetError("the connection is closed")
        else:
            await asyncio.get_running_loop().sock_sendall(self._sock, data)

    async def _credit(self, sid: int, n: int) -> None:
        """WINDOW_UPDATE for what we read (stream and session); the peer may be gone already."""
        try:
            await self._write(frame_control(9, 0, struct.pack(">II", sid, n))
                              + frame_control(9, 0, struct.pack(">II", 0, n)))
        except (ConnectionError, RuntimeError):
            pass

    async def _read_socket(self, early: bytes) -> None:
        """Every byte the server sent, until its close (EOF) or a reset after the last of them."""
        loop = asyncio.get_running_loop()
        sock = self._sock
        assert sock is not None
        try:
            chunk = early
            while True:
                if chunk:
                    await self._feed(chunk)
                chunk = await loop.sock_recv(sock, 65536)
                if not chunk:
                    return
        except ConnectionError:
            return  # reset: what the server sent before it was read above
        finally:
            self._end()

    async def _read_ws(self) -> None:
        assert self._ws is not None
        try:
            async for msg in self._ws:
                if msg.type != aiohttp.WSMsgType.BINARY:
                    break
                await self._feed(msg.data)
        finally:
            self._end()

    def _end(self) -> None:
        for s in self.streams.values():
            s.finished.set()
            s._more.set()
        self.closed.set()

    # -- frames ------------------------------------------------------------------------------------
    async def _feed(self, chunk: bytes) -> None:
        self._buf += chunk
        while len(self._buf) >= 8:
            length = int.from_bytes(self._buf[5:8], "big")
            if len(self._buf) < 8 + length:
                return
            head, body, self._buf = self._buf[:8], self._buf[8:8 + length], self._buf[8 + length:]
            flags = head[4]
            if head[0] & 0x80:
                await self._control(int.from_bytes(head[2:4], "big"), flags, body)
            else:
                sid = int.from_bytes(head[:4], "big")
                s = self.streams.get(sid)
                if s is None:
                    continue
                if body:
                    s.data += body
                    await self._credit(sid, len(body))
                if flags & 1:
                    s.finished.set()
                s._more.set()

    async def _control(self, kind: int, flags: int, body: bytes) -> None:
        self.seen.append(kind)
        if kind == 2:  # SYN_REPLY
            sid = int.from_bytes(body[:4], "big")
            parse_name_value_block(self._inflate.decompress(body[4:]))
            if sid in self.streams:
                self.streams[sid].replied.set()
                if flags & 1:
                    self.streams[sid].finished.set()
        elif kind == 3:  # RST_STREAM
            sid, status = struct.unpack(">II", body)
            if sid in self.streams:
                self.streams[sid].reset_status = status
                self.streams[sid].finished.set()
                self.streams[sid]._more.set()
        elif kind == 6:  # PING: the server echoes ours (odd ids)
            self.pongs.append(int.from_bytes(body, "big"))
        elif kind == 7:
            self.goaway.set()
        elif kind == 9:  # WINDOW_UPDATE
            sid, delta = struct.unpack(">II", body)
            if sid == 0:
                self.send_window += delta
                for s in self.streams.values():
                    s._more.set()
            elif sid in self.streams:
                self.streams[sid].send_window += delta
                self.streams[sid]._more.set()

    # -- API ---------------------------------------------------------------------------------------
    async def open(self, headers: dict[str, str], fin: bool = False) -> ClientStream:
        sid, self.next_id = self.next_id, self.next_id + 2
        s = ClientStream(self, sid, headers)
        self.streams[sid] = s
        async with self._lock:  # compress and send in one order: the zlib stream is shared
            block = self._deflate.compress(name_value_block(headers)) + self._deflate.flush(zlib.Z_SYNC_FLUSH)
            await self._send(frame_control(1, 1 if fin else 0, struct.pack(">IIBB", sid, 0, 0, 0) + block))
        return s

    async def ping(self, ping_id: int) -> None:
        await self._write(frame_control(6, 0, ping_id.to_bytes(4, "big")))

    async def settings_initial_window(self, size: int) -> None:
        await self._write(frame_control(4, 0, struct.pack(">III", 1, 7, size)))

    async def close(self) -> None:
        if self._ws is not None:
            assert self._http is not None  # the websocket's session
            await self._ws.close()
            await self._http.close()
        elif self._sock is not None:
            with contextlib.suppress(OSError):  # wakes our reader with EOF; the server sees our FIN
                self._sock.shutdown(socket.SHUT_RDWR)
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 5)
            except (TimeoutError, OSError):
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        if self._sock is not None:
            self._sock.close()  # after the reader: no fd is closed under a pending sock_recv

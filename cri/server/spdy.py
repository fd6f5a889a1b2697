"""SPDY/3.1, server side: what kubectl and kubelet proxies speak for exec, attach and port-forward.

Kubernetes upgrades an HTTP request (`Upgrade: SPDY/3.1`) and then multiplexes streams over the raw
connection (moby/spdystream on the Go side). This module keeps the protocol apart from any I/O:

- framing: control frames (SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS,
  WINDOW_UPDATE) and DATA frames, encoded and parsed incrementally (`FrameReader`);
- header blocks: name/value pairs compressed with zlib seeded with the SPDY/3 dictionary, one zlib
  stream per direction for the whole connection (`HeaderCompressor`, `HeaderDecompressor`);
- `Session`: the stream table for streams the client opens (odd ids), SYN_REPLY on accept, FIN
  half-closes, RST, PING echo, GOAWAY, and SPDY/3.1 flow control: our receive windows are reopened
  with WINDOW_UPDATE as the application consumes data; our sends wait on the peer's windows once
  the peer shows it does flow control (spdystream never sends WINDOW_UPDATE, so towards it we do not
  block — exactly what a Go kubelet does).

The session reads bytes through `feed()` (sync, from a protocol callback or a websocket reader)
and writes through one async `send` callable in frame order.
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN, FLAG_UNIDIRECTIONAL = 0x01, 0x02
# RST_STREAM status codes
PROTOCOL_ERROR, INVALID_STREAM, REFUSED_STREAM, UNSUPPORTED_VERSION, CANCEL, INTERNAL_ERROR = 1, 2, 3, 4, 5, 6
FLOW_CONTROL_ERROR, STREAM_IN_USE, STREAM_ALREADY_CLOSED = 7, 8, 9
GOAWAY_OK, GOAWAY_PROTOCOL_ERROR, GOAWAY_INTERNAL_ERROR = 0, 1, 2
SETTINGS_INITIAL_WINDOW_SIZE = 7
INITIAL_WINDOW = 64 * 1024
MAX_FRAME_DATA = (1 << 24) - 1
DATA_CHUNK = 32 * 1024  # how much one DATA frame of ours carries at most

# The SPDY/3 header dictionary (draft 3, section 2.6.10.1): length-prefixed words, then a raw tail.
_DICT_WORDS = (
    "options head post put delete trace accept accept-charset accept-encoding accept-language "
    "accept-ranges age allow authorization cache-control connection content-base content-encoding "
    "content-language content-length content-location content-md5 content-range content-type date etag "
    "expect expires from host if-match if-modified-since if-none-match if-range if-unmodified-since "
    "last-modified location max-forwards pragma proxy-authenticate proxy-authorization range referer "
    "retry-after server te trailer transfer-encoding upgrade user-agent vary via warning "
    "www-authenticate method get status"
).split() + ["200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"]
_DICT_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY = b"".join(struct.pack(">I", len(w)) + w.encode() for w in _DICT_WORDS) + _DICT_TAIL.encode()


class ProtocolError(Exception):
    """The peer broke SPDY framing: the session answers GOAWAY(PROTOCOL_ERROR) and ends."""


# -- frames ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ControlFrame:
    type: int
    flags: int
    payload: bytes


@dataclass(frozen=True)
class DataFrame:
    stream_id: int
    flags: int
    data: bytes


Frame = ControlFrame | DataFrame


def control(ftype: int, flags: int, payload: bytes) -> bytes:
    """One control frame: C bit, version 3, type, flags and a 24-bit length."""
    if len(payload) > MAX_FRAME_DATA:
        raise ValueError("control frame payload too large")
    return struct.pack(">HHI", 0x8000 | VERSION, ftype, (flags << 24) | len(payload)) + payload


def data_frame(stream_id: int, flags: int, data: bytes) -> bytes:
    if len(data) > MAX_FRAME_DATA:
        raise ValueError("data frame too large")
    return struct.pack(">II", stream_id & 0x7FFFFFFF, (flags << 24) | len(data)) + data


def syn_reply(stream_id: int, header_block: bytes, flags: int = 0) -> bytes:
    return control(SYN_REPLY, flags, struct.pack(">I", stream_id & 0x7FFFFFFF) + header_block)


def rst_stream(stream_id: int, status: int) -> bytes:
    return control(RST_STREAM, 0, struct.pack(">II", stream_id & 0x7FFFFFFF, status))


def ping(ping_id: int) -> bytes:
    return control(PING, 0, struct.pack(">I", ping_id))


def goaway(last_good: int, status: int = GOAWAY_OK) -> bytes:
    return control(GOAWAY, 0, struct.pack(">II", last_good & 0x7FFFFFFF, status))


def window_update(stream_id: int, delta: int) -> bytes:
    return control(WINDOW_UPDATE, 0, struct.pack(">II", stream_id & 0x7FFFFFFF, delta & 0x7FFFFFFF))


def settings(values: dict[int, int]) -> bytes:
    body = struct.pack(">I", len(values))
    body += b"".join(struct.pack(">II", k & 0xFFFFFF, v) for k, v in values.items())
    return control(SETTINGS, 0, body)


class FrameReader:
    """Splits a byte stream into frames; bytes may arrive in any fragmentation."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames: list[Frame] = []
        while len(self._buf) >= 8:
            first, second = struct.unpack_from(">II", self._buf)
            length = second & 0xFFFFFF
            if len(self._buf) < 8 + length:
                break
            flags = second >> 24
            body = bytes(self._buf[8:8 + length])
            del self._buf[:8 + length]
            if first & 0x80000000:
                version = (first >> 16) & 0x7FFF
                if version != VERSION:
                    raise ProtocolError(f"unsupported SPDY version {version}")
                frames.append(ControlFrame(first & 0xFFFF, flags, body))
            else:
                frames.append(DataFrame(first & 0x7FFFFFFF, flags, body))
        return frames

    @property
    def pending(self) -> int:
        return len(self._buf)


# -- header blocks ---------------------------------------------------------------------------------
Headers = dict[str, list[str]]


def encode_header_block(headers: dict[str, str | list[str]]) -> bytes:
    """The uncompressed name/value block: 32-bit counts and lengths, names lowercase, values NUL-joined."""
    out = [struct.pack(">I", len(headers))]
    for name, value in headers.items():
        v = "\0".join(value) if isinstance(value, list) else value
        n = name.lower().encode()
        vb = v.encode()
        out.append(struct.pack(">I", len(n)) + n + struct.pack(">I", len(vb)) + vb)
    return b"".join(out)


def decode_header_block(block: bytes) -> Headers:
    try:
        (count,) = struct.unpack_from(">I", block)
        pos = 4
        headers: Headers = {}
        for _ in range(count):
            (n,) = struct.unpack_from(">I", block, pos)
            name = block[pos + 4:pos + 4 + n].decode()
            pos += 4 + n
            (n,) = struct.unpack_from(">I", block, pos)
            value = block[pos + 4:pos + 4 + n].decode()
            pos += 4 + n
            if pos > len(block):
                raise ProtocolError("header block truncated")
            headers.setdefault(name.lower(), []).extend(value.split("\0"))
    except (struct.error, UnicodeDecodeError) as e:
        raise ProtocolError(f"bad header block: {e}") from None
    return headers


class HeaderCompressor:
    """Our direction's zlib stream: every block ends with a sync flush so the peer can decode it now."""

    def __init__(self) -> None:
        self._z = zlib.compressobj(level=9, zdict=DICTIONARY)

    def compress(self, headers: dict[str, str | list[str]]) -> bytes:
        return self._z.compress(encode_header_block(headers)) + self._z.flush(zlib.Z_SYNC_FLUSH)


class HeaderDecompressor:
    """The peer's zlib stream: it must see every header block of the connection, in order."""

    def __init__(self) -> None:
        self._z = zlib.decompressobj(zdict=DICTIONARY)

    def decompress(self, data: bytes) -> Headers:
        try:
            return decode_header_block(self._z.decompress(data))
        except zlib.error as e:
            raise ProtocolError(f"header decompression failed: {e}") from None


# -- session ---------------------------------------------------------------------------------------
class Stream:
    """One client-opened stream: read what the client sends until its FIN, write back until ours."""

    def __init__(self, session: Session, stream_id: int, headers: Headers, priority: int) -> None:
        self.session = session
        self.id = stream_id
        self.headers = headers
        self.priority = priority
        self.remote_closed = False
        self.local_closed = False
        self.reset = False
        self.send_window = session.peer_initial_window
        self._recv_window = INITIAL_WINDOW
        self._inbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._window_open = asyncio.Event()
        self._window_open.set()

    def header(self, name: str, default: str = "") -> str:
        values = self.headers.get(name.lower())
        return values[0] if values else default

    async def read(self) -> bytes:
        """The next chunk the client sent; b"" once it half-closed (FIN) or the stream is gone."""
        chunk = await self._inbox.get()
        if chunk is None:
            self._inbox.put_nowait(None)  # stay at EOF for later readers
            return b""
        self.session._consumed(self, len(chunk))
        return chunk

    async def write(self, data: bytes) -> None:
        """Send data, in frames that fit the peer's windows when it enforces them."""
        view = memoryview(data)
        while view:
            if self.local_closed or self.reset or self.session.closed:
                raise ConnectionResetError(f"stream {self.id} is closed")
            n = min(len(view), DATA_CHUNK)
            if self.session.peer_flow_control:
                while min(self.send_window, self.session.send_window) <= 0:
                    self._window_open.clear()
                    await self._window_open.wait()
                    if self.local_closed or self.reset or self.session.closed:
                        raise ConnectionResetError(f"stream {self.id} is closed")
                n = min(n, self.send_window, self.session.send_window)
            self.send_window -= n
            self.session.send_window -= n
            self.session._queue(data_frame(self.id, 0, bytes(view[:n])))
            view = view[n:]
            await self.session.drain()

    async def close(self) -> None:
        """Half-close our side (an empty DATA frame with FIN)."""
        if not (self.local_closed or self.reset or self.session.closed):
            self.local_closed = True
            self.session._queue(data_frame(self.id, FLAG_FIN, b""))
            self.session._maybe_forget(self)
            await self.session.drain()

    def abort(self, status: int = CANCEL) -> None:
        if not (self.reset or self.session.closed):
            self.session._queue(rst_stream(self.id, status))
        self.session._on_reset(self)

    def _wake(self) -> None:
        self._window_open.set()


class Session:
    """The server side of one SPDY/3.1 connection."""

    def __init__(self, send: Callable[[bytes], Awaitable[None]], on_stream: Callable[[Stream], None],
                 on_close: Callable[[], None] | None = None, high_water: int = 1 << 20) -> None:
        self._send = send
        self._on_stream = on_stream
        self._on_close = on_close
        self._reader = FrameReader()
        self._inflate = HeaderDecompressor()
        self._deflate = HeaderCompressor()
        self.streams: dict[int, Stream] = {}
        self.last_stream_id = 0  # highest client stream id accepted
        self.peer_initial_window = INITIAL_WINDOW
        self.peer_flow_control = False  # set once the peer sends WINDOW_UPDATE or an initial window
        self.send_window = INITIAL_WINDOW
        self._recv_window = INITIAL_WINDOW
        self.going_away = False  # the peer sent GOAWAY: no new streams
        self.closed = False
        self._out: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._out_bytes = 0
        self._high_water = high_water
        self._drained = asyncio.Event()
        self._drained.set()
        self._done = asyncio.Event()
        self._writer: asyncio.Task | None = None
        self.on_read: Callable[[], None] | None = None  # the transport may resume reading
        self.after_close: Callable[[], Awaitable[None]] | None = None  # e.g. close a carrying websocket

    # -- output ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the writer task (after the 101 answer went out)."""
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write_loop(), name="spdy-writer")

    def _queue(self, frame: bytes) -> None:
        if self.closed:
            return
        self._out_bytes += len(frame)
        if self._out_bytes > self._high_water:
            self._drained.clear()
        self._out.put_nowait(frame)

    async def _write_loop(self) -> None:
        try:
            while True:
                frame = await self._out.get()
                if frame is None:
                    return
                batch = [frame]
                while not self._out.empty():  # coalesce what is already queued
                    nxt = self._out.get_nowait()
                    if nxt is None:
                        self._out.put_nowait(None)
                        break
                    batch.append(nxt)
                payload = b"".join(batch)
                await self._send(payload)
                self._out_bytes -= len(payload)
                if self._out_bytes <= self._high_water // 2:
                    self._drained.set()
        except (ConnectionError, RuntimeError, asyncio.CancelledError):
            self._drained.set()
            self._shutdown()
            raise

    async def drain(self) -> None:
        if not self._drained.is_set():
            await self._drained.wait()

    def reply(self, stream: Stream, headers: dict[str, str | list[str]] | None = None) -> None:
        self._queue(syn_reply(stream.id, self._deflate.compress(headers or {})))

    async def close(self, status: int = GOAWAY_OK) -> None:
        """GOAWAY, flush what is queued, stop the writer."""
        if self._writer is not None:
            if not self.closed:
                self._queue(goaway(self.last_stream_id, status))
            self._out.put_nowait(None)
            try:
                await self._writer
            except (ConnectionError, RuntimeError, asyncio.CancelledError):
                pass
        self._shutdown()
        if self.after_close is not None:
            after, self.after_close = self.after_close, None
            await after()

    async def wait_closed(self) -> None:
        await self._done.wait()

    def _shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        for s in list(self.streams.values()):
            s.reset = True
            s._inbox.put_nowait(None)
            s._wake()
        self.streams.clear()
        self._done.set()
        if self._on_close is not None:
            self._on_close()

    # -- input -------------------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            for frame in self._reader.feed(data):
                if isinstance(frame, DataFrame):
                    self._on_data(frame)
                else:
                    self._on_control(frame)
        except ProtocolError:
            self._queue(goaway(self.last_stream_id, GOAWAY_PROTOCOL_ERROR))
            self._out.put_nowait(None)
            self._shutdown()

    def feed_eof(self) -> None:
        self._out.put_nowait(None)
        self._shutdown()

    @property
    def buffered(self) -> int:
        """Bytes received and not yet read by the application (for pausing the transport)."""
        return INITIAL_WINDOW - self._recv_window

    def _on_data(self, f: DataFrame) -> None:
        s = self.streams.get(f.stream_id)
        if s is None or s.remote_closed:
            if f.stream_id > self.last_stream_id or s is not None:
                self._queue(rst_stream(f.stream_id, INVALID_STREAM if s is None else STREAM_ALREADY_CLOSED))
            return
        if f.data:
            s._recv_window -= len(f.data)
            self._recv_window -= len(f.data)
            s._inbox.put_nowait(f.data)
        if f.flags & FLAG_FIN:
            self._remote_fin(s)

    def _consumed(self, s: Stream, n: int) -> None:
        """The application took n bytes: give them back to the peer's view of both windows."""
        s._recv_window += n
        self._recv_window += n
        if s.id in self.streams and not s.remote_closed:
            self._queue(window_update(s.id, n))
        self._queue(window_update(0, n))
        if self.on_read is not None:
            self.on_read()

    def _remote_fin(self, s: Stream) -> None:
        s.remote_closed = True
        s._inbox.put_nowait(None)
        self._maybe_forget(s)

    def _maybe_forget(self, s: Stream) -> None:
        if s.remote_closed and s.local_closed:
            self.streams.pop(s.id, None)

    def _on_reset(self, s: Stream) -> None:
        s.reset = True
        s._inbox.put_nowait(None)
        s._wake()
        self.streams.pop(s.id, None)

    def _on_control(self, f: ControlFrame) -> None:
        p = f.payload
        s: Stream | None  # the stream a frame names, when it is one of ours
        if f.type == SYN_STREAM:
            if len(p) < 10:
                raise ProtocolError("short SYN_STREAM")
            sid, _assoc = struct.unpack_from(">II", p)
            sid &= 0x7FFFFFFF
            headers = self._inflate.decompress(p[10:])  # always: keeps the zlib stream in step
            if sid == 0 or sid % 2 == 0 or sid <= self.last_stream_id:
                self._queue(rst_stream(sid, PROTOCOL_ERROR))
                return
            self.last_stream_id = sid
            if self.going_away:
                self._queue(rst_stream(sid, REFUSED_STREAM))
                return
            s = Stream(self, sid, headers, p[8] >> 5)
            self.streams[sid] = s
            if f.flags & FLAG_UNIDIRECTIONAL:
                s.local_closed = True
            self.reply(s)  # like a Go kubelet: every stream is accepted at once
            if f.flags & FLAG_FIN:
                self._remote_fin(s)
            self._on_stream(s)
        elif f.type == SYN_REPLY or f.type == HEADERS:
            if len(p) < 4:
                raise ProtocolError("short header frame")
            self._inflate.decompress(p[4:])
            sid = struct.unpack_from(">I", p)[0] & 0x7FFFFFFF
            s = self.streams.get(sid)
            if s is not None and f.flags & FLAG_FIN:
                self._remote_fin(s)
        elif f.type == RST_STREAM:
            if len(p) != 8:
                raise ProtocolError("bad RST_STREAM")
            sid = struct.unpack_from(">I", p)[0] & 0x7FFFFFFF
            s = self.streams.get(sid)
            if s is not None:
                self._on_reset(s)
        elif f.type == SETTINGS:
            if len(p) < 4:
                raise ProtocolError("short SETTINGS")
            (count,) = struct.unpack_from(">I", p)
            if len(p) < 4 + 8 * count:
                raise ProtocolError("truncated SETTINGS")
            for i in range(count):
                key, value = struct.unpack_from(">II", p, 4 + 8 * i)
                if key & 0xFFFFFF == SETTINGS_INITIAL_WINDOW_SIZE:
                    delta = value - self.peer_initial_window
                    self.peer_initial_window = value
                    self.peer_flow_control = True
                    for s in self.streams.values():
                        s.send_window += delta
                        s._wake()
        elif f.type == PING:
            if len(p) != 4:
                raise ProtocolError("bad PING")
            if struct.unpack(">I", p)[0] % 2 == 1:  # the client's ping (odd id): echo it
                self._queue(control(PING, 0, p))
        elif f.type == GOAWAY:
            self.going_away = True
        elif f.type == WINDOW_UPDATE:
            if len(p) != 8:
                raise ProtocolError("bad WINDOW_UPDATE")
            sid, delta = struct.unpack(">II", p)
            sid &= 0x7FFFFFFF
            delta &= 0x7FFFFFFF
            self.peer_flow_control = True
            if sid == 0:
                self.send_window += delta
                for s in self.streams.values():
                    s._wake()
            elif (s := self.streams.get(sid)) is not None:
                s.send_window += delta
                s._wake()
        # unknown control frame types are ignored, as the spec asks

"""Client sides of an interactive CRI attach for the tests:
SPDY/3.1 (spdy_client.py) and websocket channel.k8s.io."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp

from tests.integration.cri.spdy_client import SpdyClient

V4 = "v4.channel.k8s.io"
V5 = "v5.channel.k8s.io"


class SpdyAttach:
    """kubectl's SPDY attach: error, then stdin/stdout/stderr/resize streams as asked."""

    def __init__(self, conn: SpdyClient, streams: dict) -> None:
        self.conn, self.streams = conn, streams

    @classmethod
    async def open(cls, url: str, kinds: list[str]) -> SpdyAttach:
        conn = await SpdyClient.upgrade(url, [V4])
        assert conn.status == 101, conn.response_headers
        streams = {}
        for kind in ["error", *kinds]:
            streams[kind] = await conn.open({"streamtype": kind})
        for s in streams.values():
            await asyncio.wait_for(s.replied.wait(), 10)
        return cls(conn, streams)

    async def send(self, data: bytes) -> None:
        await self.streams["stdin"].write(data)

    async def resize(self, width: int, height: int) -> None:
        await self.streams["resize"].write(json.dumps({"Width": width, "Height": height}).encode() + b"\n")

    def output(self) -> bytes:
        return bytes(self.streams["stdout"].data)

    async def until(self, marker: bytes, resend: bytes | None = None, wait_s: float = 20) -> bytes:
        """Wait for marker on stdout, sending resend every half second meanwhile (if given)."""
        return await _until(self.output, marker, (lambda: self.send(resend)) if resend else None, wait_s)

    async def status(self, wait_s: float = 30, goaway: bool = True) -> dict:
        """The session's end: the Status on the error stream (v4) after stdout's FIN, then the server's
        end of the connection: a GOAWAY (ours always sends it), or with goaway=False just its close.
        containerd's stream server (kubelet's streaming code on spdystream) resets the streams, sends
        GOAWAY and closes, but its close can overtake its own last frames: captured sessions end inside
        an RST_STREAM or right after one, with no GOAWAY (the Status before them is always whole).
        kubectl does not wait for a GOAWAY either: the Status and the connection's end are the answer."""
        await self.streams["stdout"].read_all(wait_s)
        raw = await self.streams["error"].read_all(wait_s)
        await asyncio.wait_for((self.conn.goaway if goaway else self.conn.closed).wait(), wait_s)
        return json.loads(raw)

    async def close(self) -> None:
        await self.conn.close()


class WsAttach:
    """A websocket attach speaking channel.k8s.io framing (v4, or v5 with its stdin close message)."""

    def __init__(self, http: aiohttp.ClientSession, ws, protocol: str) -> None:
        self.http, self.ws, self.protocol = http, ws, protocol
        self.got: dict[int, bytes] = {}
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str, protocol: str) -> WsAttach:
        http = aiohttp.ClientSession()
        ws = await http.ws_connect(url, protocols=[protocol])
        assert ws.protocol == protocol
        return cls(http, ws, protocol)

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.BINARY:
                break
            if msg.data:
                self.got[msg.data[0]] = self.got.get(msg.data[0], b"") + msg.data[1:]

    async def send(self, data: bytes) -> None:
        await self.ws.send_bytes(b"\x00" + data)

    async def resize(self, width: int, height: int) -> None:
        await self.ws.send_bytes(b"\x04" + json.dumps({"Width": width, "Height": height}).encode())

    async def close_stdin(self) -> None:
        assert self.protocol == V5
        await self.ws.send_bytes(b"\xff\x00")

    def output(self) -> bytes:
        return self.got.get(1, b"")

    async def until(self, marker: bytes, resend: bytes | None = None, wait_s: float = 20) -> bytes:
        return await _until(self.output, marker, (lambda: self.send(resend)) if resend else None, wait_s)

    async def status(self, wait_s: float = 30) -> dict:
        await asyncio.wait_for(self.reader, wait_s)
        return json.loads(self.got[3])

    async def close(self) -> None:
        await self.ws.close()
        self.reader.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)
        await self.http.close()


async def _until(output, marker: bytes, resend, wait_s: float) -> bytes:
    deadline = time.monotonic() + wait_s
    next_send = 0.0
    while marker not in output():
        if time.monotonic() > deadline:
            raise AssertionError(f"{marker!r} never came; got {output()[-400:]!r}")
        if resend is not None and time.monotonic() >= next_send:
            await resend()
            next_send = time.monotonic() + 0.5
        await asyncio.sleep(0.05)
    return output()

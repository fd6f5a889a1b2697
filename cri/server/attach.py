"""Attach sessions: the container's output from its shim, the client's input into its stdin FIFO.

Output comes raw from the shim's output socket (cri/runtime/stdio.py): each read from the container's
stdout or stderr reaches the client as it is written, partial lines included, as containerd streams it
to attach clients, while the CRI log keeps its line records; what was written before the session
started is not replayed (containerd's way too). A container whose shim predates the socket is followed
through its CRI log instead (records end at a newline, so a partial line waits). Input goes into the
FIFO the shim holds (cri/runtime/stdio.py), so attaching works the same after the daemon restarted.
What the end of the client's stdin means follows containerd's CRI attach: with stdin_once (and no
terminal) the container's stdin is closed and the session goes on until the container exits;
otherwise the session ends with it. A session that asked for stdin on a container made without it
streams output and drops the input, as containerd does. With a terminal, resize messages set its
window size through the shim.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, BinaryIO

from aiohttp import WSMsgType, web

from cri.runtime import stdio
from cri.server import spdy_streams as sp
from cri.server.fdio import write_fd

log = logging.getLogger("nodeagent.cri.attach")

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
SUCCESS = json.dumps({"metadata": {}, "status": "Success"}).encode()


class AttachInput:
    """One session's way into the container's stdin and terminal."""

    def __init__(self, cdir: Path, req: dict[str, Any]) -> None:
        self.cdir = cdir
        self.tty = bool(req.get("tty"))
        self.container_tty = bool(req.get("container_tty"))
        self.stdin_once = bool(req.get("stdin_once"))
        self.container_stdin = bool(req.get("container_stdin"))
        self.fd = stdio.open_stdin(cdir) if req.get("stdin") else None
        self.feeds = self.fd is not None
        if req.get("stdin") and not self.feeds:
            log.info("attach to %s: the container has no open stdin; input is dropped", cdir.name)

    async def write(self, data: bytes) -> None:
        if self.fd is None or not data:
            return
        try:
            await write_fd(self.fd, data)
        except OSError:  # nobody reads it any more (the container exited or closed its stdin)
            self._close_fd()

    def resize(self, width: int, height: int) -> None:
        if self.container_tty:
            stdio.resize(self.cdir, width, height)

    def end_of_input(self) -> bool:
        """The client closed its stdin; True when the session ends with it (never for a container
        made without stdin: its input is ignored altogether, as containerd does)."""
        self.finish()
        return self.container_stdin and not (self.stdin_once and not self.tty)

    def finish(self) -> None:
        """The session's input is over: stdin_once closes the container's stdin (idempotent)."""
        self._close_fd()
        if self.feeds and self.stdin_once and not self.tty:
            self.feeds = False
            stdio.close_stdin(self.cdir)

    def _close_fd(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


MESSAGE_MAX = 65536  # the shim sends at most 1 + 16 KiB a message
EXIT_WAIT = 5.0  # how long the exit status may take to be recorded once the shim has gone


def open_log(path: str) -> BinaryIO:
    """The container's output log, positioned at its end: what is written from now on is this session's."""
    f = open(path, "rb")  # closed by the session
    f.seek(0, os.SEEK_END)
    return f


class Output:
    """Where one session takes the container's output from: the shim's socket, else the CRI log."""

    def __init__(self, c: Any, cdir: Path, log_path: str) -> None:
        self.c = c
        # connected before the session takes any input, so the reply to it cannot be missed
        self.sock = stdio.connect_output(cdir) if c.state.can_attach() else None
        self.log = open_log(log_path) if self.sock is None and log_path else None

    @property
    def available(self) -> bool:
        return self.sock is not None or self.log is not None or not self.c.state.can_attach()

    async def follow(self, req: dict[str, Any], send: Callable[[int, bytes], Awaitable[None]]) -> None:
        """Hand the output on to send(channel, bytes) until the container has exited."""
        if self.sock is not None:
            await self._follow_socket(req, send)
        elif self.log is not None:
            await follow_log(self.log, self.c, req, send, lambda: False)

    async def _follow_socket(self, req: dict[str, Any],
                             send: Callable[[int, bytes], Awaitable[None]]) -> None:
        assert self.sock is not None
        loop = asyncio.get_running_loop()
        while msg := await loop.sock_recv(self.sock, MESSAGE_MAX):
            ch = STDOUT if msg[0] == stdio.OUT_STDOUT else STDERR
            if len(msg) > 1 and ((ch == STDOUT and req["stdout"]) or (ch == STDERR and req["stderr"])):
                await send(ch, msg[1:])
        # The shim is gone: the exit status the session reports is the runtime's record of it.
        async with asyncio.timeout(EXIT_WAIT):
            while self.c.state.can_attach():  # noqa: ASYNC110 - the runtime's exit watch sets it
                await asyncio.sleep(0.02)

    def close(self) -> None:
        for f in (self.sock, self.log):
            if f is not None:
                f.close()


async def follow_log(f: BinaryIO, c: Any, req: dict[str, Any], send, closed) -> None:
    """Hand each CRI log record from f on to send(channel, text) until the container stops or closed()."""
    pending = b""
    while not closed():
        chunk = f.read(65536)
        if not chunk:
            if not c.state.can_attach():
                break
            await asyncio.sleep(0.05)
            continue
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            parts = line.split(b" ", 3)
            if len(parts) < 4:
                continue
            stream, tag, text = parts[1], parts[2], parts[3]
            ch = STDOUT if stream == b"stdout" else STDERR
            if (ch == STDOUT and req["stdout"]) or (ch == STDERR and req["stderr"]):
                await send(ch, text + (b"\n" if tag == b"F" else b""))


async def serve_websocket(ws: web.WebSocketResponse, c: Any, out: Output, cdir: Path, req: dict[str, Any],
                          exit_status) -> None:
    """One attach over channel.k8s.io websocket framing (the upgrade is done)."""
    inp = AttachInput(cdir, req)
    ended = asyncio.Event()
    lock = asyncio.Lock()

    async def send(ch: int, data: bytes) -> None:
        async with lock:
            if not ws.closed:
                await ws.send_bytes(bytes([ch]) + data)

    async def client() -> None:
        async for msg in ws:
            data = client_frame(msg)
            if data is None:
                continue
            ch, data = data[0], data[1:]
            if ch == STDIN:
                await inp.write(data)
            elif ch == RESIZE:
                with contextlib.suppress(ValueError, TypeError, AttributeError):
                    size = json.loads(data or b"{}")
                    inp.resize(int(size.get("Width", 80)), int(size.get("Height", 24)))
            elif ch == CLOSE and data[:1] == bytes([STDIN]) and inp.end_of_input():
                ended.set()
                return

    for ch, want in ((STDOUT, req["stdout"]), (STDERR, req["stderr"])):
        if want:
            await send(ch, b"")
    following = asyncio.create_task(out.follow(req, send))
    cin = asyncio.create_task(client())
    try:
        await asyncio.wait({following, cin}, return_when=asyncio.FIRST_COMPLETED)
        if cin.done() and not ended.is_set():
            return  # the client went away
        if following.done():
            following.result()
            await send(ERROR, exit_status(c.exit_code))
        else:
            await send(ERROR, SUCCESS)  # the end of the client's input ended the session
    finally:
        for t in (following, cin):
            t.cancel()
        await asyncio.gather(following, cin, return_exceptions=True)
        inp.finish()
        out.close()
        if not ws.closed:
            await ws.close()


def client_frame(msg: Any) -> bytes | None:
    """The bytes of a client's websocket data frame, or None for anything else. Text frames count as
    binary ones, as kubelet's websocket server reads them: the Python client sends str input as text."""
    if msg.type == WSMsgType.BINARY and msg.data:
        return bytes(msg.data)
    if msg.type == WSMsgType.TEXT and msg.data:
        return str(msg.data).encode()
    return None


async def serve_spdy(rc: sp.RemoteCommand, c: Any, out: Output, cdir: Path, req: dict[str, Any],
                     exit_status, exit_message) -> None:
    """One attach over SPDY streams (cancelled when the client goes away)."""
    inp = AttachInput(cdir, req)
    ended = asyncio.Event()

    async def send(ch: int, data: bytes) -> None:
        await rc.send("stdout" if ch == STDOUT else "stderr", data)

    async def stdin_pump(stream) -> None:
        while data := await stream.read():
            await inp.write(data)
        if inp.end_of_input():
            ended.set()

    async def resize_pump(stream) -> None:
        async for width, height in sp.read_sizes(stream):
            inp.resize(width, height)

    inputs = []  # resize first: a size sent before the input applies before it
    if "resize" in rc.streams:
        inputs.append(asyncio.create_task(resize_pump(rc.streams["resize"])))
    if "stdin" in rc.streams:
        inputs.append(asyncio.create_task(stdin_pump(rc.streams["stdin"])))
    following = asyncio.create_task(out.follow(req, send))
    stop = asyncio.create_task(ended.wait())
    try:
        await asyncio.wait({following, stop}, return_when=asyncio.FIRST_COMPLETED)
        await rc.close_output()
        if following.done():
            following.result()
            await rc.write_status(exit_status(c.exit_code), exit_message(c.exit_code))
        else:
            await rc.write_status(SUCCESS, None)
    finally:
        for t in (*inputs, following, stop):
            t.cancel()
        await asyncio.gather(*inputs, following, stop, return_exceptions=True)
        inp.finish()
        out.close()

"""Attach sessions: the container's output from its CRI log, the client's input into its stdin FIFO.

Output comes from the log the shim writes (followed from its end when the session starts: like
containerd, no historical output). Input goes into the FIFO the shim holds (cri/runtime/stdio.py),
so attaching works the same after the daemon restarted. What the end of the client's stdin means
follows containerd's CRI attach: with stdin_once (and no terminal) the container's stdin is closed
and the session goes on until the container exits; otherwise the session ends with it. A session
that asked for stdin on a container made without it streams output and drops the input, as
containerd does. With a terminal, resize messages set its window size through the shim.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
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


def open_log(path: str) -> BinaryIO:
    """The container's output log, positioned at its end: what is written from now on is this session's."""
    f = open(path, "rb")  # closed by the session
    f.seek(0, os.SEEK_END)
    return f


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


async def serve_websocket(ws: web.WebSocketResponse, c: Any, cdir: Path, log_path: str, req: dict[str, Any],
                          exit_status) -> None:
    """One attach over channel.k8s.io websocket framing (the upgrade is done)."""
    f = open_log(log_path)
    inp = AttachInput(cdir, req)
    ended = asyncio.Event()
    lock = asyncio.Lock()

    async def send(ch: int, data: bytes) -> None:
        async with lock:
            if not ws.closed:
                await ws.send_bytes(bytes([ch]) + data)

    async def client() -> None:
        async for msg in ws:
            if msg.type != WSMsgType.BINARY or not msg.data:
                continue
            ch, data = msg.data[0], msg.data[1:]
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
    out = asyncio.create_task(follow_log(f, c, req, send, lambda: ws.closed or ended.is_set()))
    cin = asyncio.create_task(client())
    try:
        await asyncio.wait({out, cin}, return_when=asyncio.FIRST_COMPLETED)
        if cin.done() and not ended.is_set():
            return  # the client went away
        await out
        cin.cancel()
        await send(ERROR, SUCCESS if ended.is_set() else exit_status(c.exit_code))
    finally:
        for t in (out, cin):
            t.cancel()
        await asyncio.gather(out, cin, return_exceptions=True)
        inp.finish()
        f.close()
        if not ws.closed:
            await ws.close()


async def serve_spdy(rc: sp.RemoteCommand, c: Any, cdir: Path, log_path: str, req: dict[str, Any],
                     exit_status, exit_message) -> None:
    """One attach over SPDY streams (cancelled when the client goes away)."""
    f = open_log(log_path)
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
    try:
        await follow_log(f, c, req, send, lambda: rc.session.closed or ended.is_set())
        await rc.close_output()
        if ended.is_set():
            await rc.write_status(SUCCESS, None)
        else:
            await rc.write_status(exit_status(c.exit_code), exit_message(c.exit_code))
    finally:
        for t in inputs:
            t.cancel()
        await asyncio.gather(*inputs, return_exceptions=True)
        inp.finish()
        f.close()

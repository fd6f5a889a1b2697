"""What the end of an attach client's stdin means (containerd's CRI attach rules), with FIFOs in a tmp dir."""

from __future__ import annotations

import asyncio
import os

import pytest

from cri.runtime import stdio
from cri.server.attach import AttachInput


@pytest.fixture
def held(tmp_path):
    """A container dir whose stdin FIFO is held read-write, as the shim holds it."""
    path, _ = stdio.prepare(tmp_path, stdin=True, tty=False)
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    yield tmp_path, fd
    os.close(fd)


def _req(**kw) -> dict:
    return {"stdin": True, "container_stdin": True, "tty": False, "container_tty": False,
            "stdin_once": False, **kw}


@pytest.mark.parametrize(("flags", "ends", "closes"), [
    ({}, True, False),                                        # the session ends with the client's input
    ({"stdin_once": True}, False, True),                      # stdin closes; output goes on till exit
    ({"stdin_once": True, "tty": True, "container_tty": True}, True, False),  # a terminal is never closed
    ({"container_stdin": False}, False, False),               # no stdin: input ignored altogether
])
def test_end_of_input(held, flags, ends, closes):
    cdir, reader = held
    inp = AttachInput(cdir, _req(**flags))
    assert inp.end_of_input() is ends
    assert (cdir / stdio.STDIN_CLOSED).exists() is closes
    assert inp.fd is None


def test_input_reaches_the_fifo(held):
    cdir, reader = held
    inp = AttachInput(cdir, _req())
    asyncio.run(inp.write(b"hello\n"))
    assert os.read(reader, 100) == b"hello\n"
    inp.finish()
    assert AttachInput(cdir, _req(stdin=False)).fd is None  # a session without stdin opens nothing


def test_client_frames_text_counts_as_data():
    """A client's text frame is data, as kubelet's websocket server reads it (the Python client sends str
    stdin as text); control frames and empty ones are not."""
    from aiohttp import WSMessage, WSMsgType

    from cri.server.attach import client_frame

    assert client_frame(WSMessage(WSMsgType.BINARY, b"\x00hi\n", None)) == b"\x00hi\n"
    assert client_frame(WSMessage(WSMsgType.TEXT, "\x00héllo\n", None)) == "\x00héllo\n".encode()
    assert client_frame(WSMessage(WSMsgType.TEXT, "", None)) is None
    assert client_frame(WSMessage(WSMsgType.PING, b"x", None)) is None
    assert client_frame(WSMessage(WSMsgType.CLOSE, 1000, "")) is None

"""Reads and writes on a command's pipes and pty master without parking a thread on them.

A streaming session can wait on its client for as long as it likes (an interactive shell, a `cat`
waiting for stdin); a blocking os.read/os.write pushed to the default executor would hold one of its
few threads for all that time, and a handful of such sessions would starve every other
`asyncio.to_thread` user in the daemon. Here the fds are non-blocking and the event loop's
reader/writer callbacks say when to try again.
"""

from __future__ import annotations

import asyncio
import errno
import os


def make_nonblocking(*fds: int | None) -> None:
    for fd in fds:
        if fd is not None:
            os.set_blocking(fd, False)


async def _ready(fd: int, writing: bool) -> None:
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)
    (loop.add_writer if writing else loop.add_reader)(fd, wake)
    try:
        await fut
    finally:
        (loop.remove_writer if writing else loop.remove_reader)(fd)


async def read_fd(fd: int, size: int = 65536) -> bytes:
    """The next bytes from a pipe or pty master; b"" at EOF (a pty master's EIO once the command is gone)."""
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            await _ready(fd, writing=False)
        except OSError as e:
            if e.errno == errno.EIO:
                return b""
            raise


async def write_fd(fd: int, data: bytes) -> None:
    """All of data into a pipe or pty master, waiting while it is full."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            await _ready(fd, writing=True)

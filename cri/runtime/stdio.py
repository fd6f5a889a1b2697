"""A container's stdin and terminal, as the runtime daemon reaches them: FIFOs its shim holds open.

A container made with ContainerConfig.stdin reads its fd 0 from `<container dir>/stdin`, a FIFO that
the per-container shim (cri/shim/shim.c) opened read-write before the container started: while nobody
is attached the container sees no EOF, and the daemon (also a restarted one) writes into the FIFO by
opening its path. `<container dir>/ctl` is the shim's control FIFO: "close-stdin" (the shim lets go
of the stdin FIFO, so the container reads EOF once the attached writer closes: stdin_once) and
"resize W H" (the terminal's window size, for containers made with tty). A marker file remembers that
stdin was closed, so a later attach (or a restarted daemon) does not feed it again.

`<container dir>/attach` is the shim's output socket (SOCK_SEQPACKET): a connected client gets every
read from the container's stdout and stderr as one message, its first byte the stream (1 stdout,
2 stderr), as the container writes it — raw, not the log's line records — until the shim exits (EOF).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from pathlib import Path

STDIN_FIFO, CONTROL_FIFO, STDIN_CLOSED, ATTACH_SOCKET = "stdin", "ctl", "stdin.closed", "attach"
OUT_STDOUT, OUT_STDERR = 1, 2  # the first byte of an output socket message


def prepare(cdir: Path, stdin: bool, tty: bool) -> tuple[str, str]:
    """Make the FIFOs the shim will hold for a container: (stdin path or "", control path or "")."""
    paths = []
    for name, wanted in ((STDIN_FIFO, stdin), (CONTROL_FIFO, stdin or tty)):
        p = cdir / name
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
        if wanted:
            os.mkfifo(p, 0o600)
        paths.append(str(p) if wanted else "")
    with contextlib.suppress(FileNotFoundError):
        (cdir / STDIN_CLOSED).unlink()
    return paths[0], paths[1]


def open_stdin(cdir: Path) -> int | None:
    """A non-blocking write end of the container's stdin, or None (no stdin, closed, or nobody reads)."""
    if (cdir / STDIN_CLOSED).exists():
        return None
    try:
        return os.open(cdir / STDIN_FIFO, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENXIO):  # made without stdin; the shim is gone
            return None
        raise


def _control(cdir: Path, command: str) -> bool:
    """One command to the shim (a line under PIPE_BUF: written whole); False when it is gone."""
    try:
        fd = os.open(cdir / CONTROL_FIFO, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.write(fd, f"{command}\n".encode())
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def close_stdin(cdir: Path) -> None:
    """stdin_once: the container reads EOF once the attached writers close; no later attach feeds it."""
    if not (cdir / STDIN_FIFO).exists():
        return
    with contextlib.suppress(OSError):
        (cdir / STDIN_CLOSED).touch()
    _control(cdir, "close-stdin")


def resize(cdir: Path, width: int, height: int) -> None:
    """Set the container terminal's window size (the kernel sends its foreground group SIGWINCH)."""
    if 0 < width < 65536 and 0 < height < 65536:
        _control(cdir, f"resize {width} {height}")


def attach_socket(cdir: Path) -> str:
    """Where the shim serves a container's raw output to attached clients."""
    return str(cdir / ATTACH_SOCKET)


def connect_output(cdir: Path) -> socket.socket | None:
    """A non-blocking connection to the shim's output socket, or None when there is none (the shim has
    exited, predates the socket, or has all the clients it takes). The path is reached through an O_PATH
    descriptor of the directory, so its length is not bounded by sun_path."""
    try:
        dfd = os.open(cdir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
    try:
        sock.connect(f"/proc/self/fd/{dfd}/{ATTACH_SOCKET}")
    except (FileNotFoundError, ConnectionRefusedError, BlockingIOError):  # BlockingIOError: backlog full
        sock.close()
        return None
    except BaseException:
        sock.close()
        raise
    finally:
        os.close(dfd)
    return sock

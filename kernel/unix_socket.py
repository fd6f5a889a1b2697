"""A listening Unix socket only its owner (root) may connect to: the mode is set on the socket before
bind(), so the file is never world-connectable, not even for the instant between bind and chmod."""

from __future__ import annotations

import os
import socket
import stat

# sun_path holds 108 bytes with its terminating NUL
MAX_PATH = 107


class SocketPathError(ValueError):
    """A path that cannot name a Unix socket (too long), or is taken by something that is not one."""


def bind_private(path: str, mode: int = 0o600, backlog: int = 1024) -> socket.socket:
    """A listening, non-blocking AF_UNIX socket at `path` with `mode`. A stale socket file there (a previous
    run killed -9) is replaced; any other kind of file is refused."""
    if len(os.fsencode(path)) > MAX_PATH:
        raise SocketPathError(f"{path}: {len(os.fsencode(path))} bytes, a Unix socket's path has at most "
                              f"{MAX_PATH}")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise SocketPathError(f"{path}: exists and is not a socket; not replaced")
        os.unlink(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound = False
    try:
        # Linux creates the socket's file with the socket inode's mode (less the umask): set it first
        os.fchmod(s.fileno(), mode)
        s.bind(path)
        bound = True
        os.chmod(path, mode)  # the umask may have taken bits: exactly `mode`, as asked
        s.listen(backlog)
        s.setblocking(False)
    except BaseException:
        s.close()
        if bound:
            remove(path)
        raise
    return s


def remove(path: str) -> None:
    """The socket file gone (a stopped server's); anything else at the path is left alone."""
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass

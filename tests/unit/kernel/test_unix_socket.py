"""kernel.unix_socket: a listening socket only its owner may connect to, from the moment it exists."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from kernel import unix_socket


def test_mode_is_0600_even_under_a_permissive_umask(tmp_path):
    path = str(tmp_path / "api.sock")
    old = os.umask(0)
    try:
        s = unix_socket.bind_private(path)
    finally:
        os.umask(old)
    try:
        st = os.stat(path)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(path)  # it listens
        c.close()
    finally:
        s.close()
        unix_socket.remove(path)
    assert not os.path.exists(path)


def test_a_stale_socket_is_replaced(tmp_path):
    path = str(tmp_path / "api.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()  # the file stays, as after a kill -9
    s = unix_socket.bind_private(path)
    try:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(path)
        c.close()
    finally:
        s.close()
        unix_socket.remove(path)


def test_a_file_that_is_not_a_socket_is_refused_and_kept(tmp_path):
    path = tmp_path / "api.sock"
    path.write_text("data")
    with pytest.raises(unix_socket.SocketPathError, match="not a socket"):
        unix_socket.bind_private(str(path))
    assert path.read_text() == "data"
    unix_socket.remove(str(path))  # remove leaves a non-socket alone too
    assert path.exists()


def test_a_path_too_long_for_sun_path_is_refused(tmp_path):
    path = str(tmp_path / ("x" * 120))
    with pytest.raises(unix_socket.SocketPathError, match="at most 107"):
        unix_socket.bind_private(path)
    assert not os.path.exists(path)

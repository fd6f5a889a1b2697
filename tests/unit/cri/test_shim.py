"""The C shim writes CRI-format logs and the exit status; no root needed (it supervises a plain child)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from cri.runtime.service import RuntimeOptions

SHIM = RuntimeOptions(state_dir=Path("/nonexistent")).shim
pytestmark = pytest.mark.skipif(not os.path.exists(SHIM), reason="shim not built: run make build")


def spawn_under_shim(tmp_path: Path, script: str, extra: tuple[str, ...] = (),
                     stdin: int | None = None) -> int:
    """Fork a child running `script` (its stdin from `stdin` when given), exec the shim as its parent (as the
    runtime does) with `extra` arguments after the five; the shim's pid."""
    log, exit_file = tmp_path / "ctr.log", tmp_path / "exit"
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    p1 = os.fork()
    if p1 == 0:
        child = os.fork()
        if child == 0:
            if stdin is not None:
                os.dup2(stdin, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.execv("/bin/sh", ["sh", "-c", script])
        os.close(out_w)
        os.close(err_w)
        os.set_inheritable(out_r, True)
        os.set_inheritable(err_r, True)
        os.execv(SHIM, [SHIM, str(exit_file), str(log), str(child), str(out_r), str(err_r), *extra])
    for fd in (out_r, out_w, err_r, err_w):
        os.close(fd)
    return p1


def run_under_shim(tmp_path: Path, script: str) -> tuple[str, str]:
    """Run `script` under the shim to the end: (its log, its exit file)."""
    os.waitpid(spawn_under_shim(tmp_path, script), 0)
    return (tmp_path / "ctr.log").read_text(), (tmp_path / "exit").read_text()


def test_log_lines_and_exit_code(tmp_path):
    log, status = run_under_shim(tmp_path, "echo one; echo two >&2; printf tail; exit 3")
    lines = log.splitlines()
    pat = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (stdout|stderr) ([FP]) (.*)$")
    matches = [pat.match(x) for x in lines]
    parsed = [m.groups() for m in matches if m]
    assert len(parsed) == len(lines), lines
    assert ("stdout", "F", "one") in parsed and ("stderr", "F", "two") in parsed
    assert ("stdout", "F", "tail") in parsed
    assert status.startswith("code=3 signal=0 finished=")


def test_long_lines_are_split_as_partials(tmp_path):
    log, _ = run_under_shim(tmp_path, "head -c 40000 /dev/zero | tr '\\0' x; echo")
    tags = [line.split(" ", 3)[2] for line in log.splitlines()]
    assert tags[-1] == "F" and tags.count("P") >= 2
    assert sum(len(line.split(" ", 3)[3]) for line in log.splitlines()) == 40000


def test_signal_exit(tmp_path):
    _, status = run_under_shim(tmp_path, "kill -9 $$")
    assert status.startswith("code=137 signal=9")


def test_attach_socket_streams_partial_output_at_once(tmp_path):
    """An attached client gets what the container writes as it writes it, a partial line included, while
    the log still holds line records only (the partial is logged when the stream ends)."""
    from cri.runtime import stdio

    log, cdir = tmp_path / "ctr.log", tmp_path / "c"
    cdir.mkdir()
    in_r, in_w = os.pipe()
    p1 = spawn_under_shim(tmp_path, 'read x; printf "$x"; printf oops >&2; read y',
                          ("-1", "-1", "0", stdio.attach_socket(cdir)), stdin=in_r)
    os.close(in_r)
    try:
        sock = None
        for _ in range(200):  # the shim makes its socket as it starts
            sock = stdio.connect_output(cdir)
            if sock is not None:
                break
            time.sleep(0.01)
        assert sock is not None, "the shim never served its attach socket"
        sock.setblocking(True)
        sock.settimeout(10)
        os.write(in_w, b"hello\n")
        got = {sock.recv(65536), sock.recv(65536)}
        assert got == {b"\x01hello", b"\x02oops"}
        assert "hello" not in log.read_text()  # no newline yet: no log record either
    finally:
        os.close(in_w)
        os.waitpid(p1, 0)
    assert sock.recv(65536) == b""  # the shim exited: end of output
    sock.close()
    assert " stdout F hello" in log.read_text()
    assert not (cdir / stdio.ATTACH_SOCKET).exists()

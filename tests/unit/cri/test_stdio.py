"""The stdin FIFO held by the shim, and its control FIFO (cri/runtime/stdio.py + cri/shim/shim.c); no root:
the shim supervises a plain child reading the FIFO as the runtime's container would."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cri.runtime import stdio
from cri.runtime.service import RuntimeOptions

SHIM = RuntimeOptions(state_dir=Path("/nonexistent")).shim
needs_shim = pytest.mark.skipif(not os.path.exists(SHIM), reason="shim not built: run make build")


def test_prepare_and_no_reader(tmp_path):
    assert stdio.prepare(tmp_path, stdin=False, tty=False) == ("", "")
    assert stdio.open_stdin(tmp_path) is None  # made without stdin
    path, ctl = stdio.prepare(tmp_path, stdin=True, tty=False)
    assert Path(path).is_fifo() and Path(ctl).is_fifo()
    assert stdio.open_stdin(tmp_path) is None  # nobody holds it: no shim
    keep = os.open(path, os.O_RDWR)
    try:
        fd = stdio.open_stdin(tmp_path)
        assert fd is not None
        os.close(fd)
        stdio.close_stdin(tmp_path)  # the shim is gone (no control reader): still remembered
        assert stdio.open_stdin(tmp_path) is None
    finally:
        os.close(keep)
    stdio.prepare(tmp_path, stdin=True, tty=False)  # a restart of the container starts afresh
    assert not (tmp_path / stdio.STDIN_CLOSED).exists()


def _run(tmp_path: Path, script: str) -> int:
    """The runtime's _p1 in small: the shim holds the FIFOs, the child reads stdin; the shim's pid."""
    path, ctl = stdio.prepare(tmp_path, stdin=True, tty=False)
    log, exit_file = tmp_path / "ctr.log", tmp_path / "exit"
    p1 = os.fork()
    if p1 == 0:
        keep = os.open(path, os.O_RDWR)
        c = os.open(ctl, os.O_RDWR)
        rd = os.open(path, os.O_RDONLY)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        child = os.fork()
        if child == 0:
            for target, fd in enumerate((rd, out_w, err_w)):
                os.dup2(fd, target)
            os.closerange(3, 1 << 16)
            os.execv("/bin/sh", ["sh", "-c", script])
        for fd in (rd, out_w, err_w):
            os.close(fd)
        for fd in (out_r, err_r, keep, c):
            os.set_inheritable(fd, True)
        os.execv(SHIM,
                 [SHIM, str(exit_file), str(log), str(child), str(out_r), str(err_r), str(keep), str(c), "0"])
    return p1


def _wait_log(tmp_path: Path, text: str, wait_s: float = 10) -> str:
    deadline = time.monotonic() + wait_s
    while True:
        log = (tmp_path / "ctr.log").read_text() if (tmp_path / "ctr.log").exists() else ""
        if text in log or time.monotonic() > deadline:
            return log
        time.sleep(0.05)


@needs_shim
def test_stdin_stays_open_between_writers_until_close_stdin(tmp_path):
    shim = _run(tmp_path, "while read x; do echo got $x; done; echo eof")
    try:
        for word in ("one", "two"):
            fd = None
            while fd is None:  # the shim opens the FIFO as it starts
                fd = stdio.open_stdin(tmp_path)
            os.write(fd, f"{word}\n".encode())
            os.close(fd)  # a writer going away is no EOF: the shim holds the FIFO
            assert f"got {word}" in _wait_log(tmp_path, f"got {word}")
        assert "eof" not in _wait_log(tmp_path, "eof", wait_s=1)  # no writer now, and still no EOF
        stdio.close_stdin(tmp_path)
        assert "stdout F eof" in _wait_log(tmp_path, "eof")
    finally:
        stdio.close_stdin(tmp_path)  # idempotent: the child ends either way, and so does its shim
        os.waitpid(shim, 0)
    assert (tmp_path / "exit").read_text().startswith("code=0 ")

"""kernel.procs.spawn: the child gets the fds, session and signal dispositions asked for, nothing else."""

import os
import signal

import pytest

from kernel import procs


def _run(script: str, **kw) -> tuple[int, str]:
    r, w = os.pipe()
    try:
        pid = procs.spawn("/bin/sh", ["sh", "-c", script], [(w, 1)], **kw)
    finally:
        os.close(w)
    with open(r, "rb") as f:
        out = f.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return pid, out


def test_fds_are_dup_d_and_others_closed_from_the_given_number():
    keep = os.open(os.devnull, os.O_RDONLY)  # inheritable: only close_from keeps it out
    os.set_inheritable(keep, True)
    try:
        _, out = _run(f"test -e /proc/self/fd/{keep} && echo open || echo closed")
        assert out.strip() == "open"
        _, out = _run(f"test -e /proc/self/fd/{keep} && echo open || echo closed", close_from=3)
        assert out.strip() == "closed"
    finally:
        os.close(keep)


def test_setsid_and_default_signals():
    pid, out = _run("ps -o sid= -p $$; grep SigIgn /proc/self/status", setsid=True,
                    default_signals=procs.RESTORED_SIGNALS)
    sid, ign = out.split("\n", 1)
    assert int(sid) == pid
    mask = int(ign.split()[1], 16)
    assert not mask & (1 << (signal.SIGPIPE - 1))  # Python ignores it; exec would keep that
    _, out = _run("grep SigIgn /proc/self/status")
    assert int(out.split()[1], 16) & (1 << (signal.SIGPIPE - 1))


def test_exec_failure_is_the_child_errno():
    with pytest.raises(FileNotFoundError):
        procs.spawn("/nonexistent/pause", ["pause"], [])

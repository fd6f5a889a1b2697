"""kernel.procs.spawn: the child gets the fds, session and signal dispositions asked for, nothing else, on
the ctypes path and on its os.posix_spawn fallback alike."""

import logging
import os
import signal

import pytest

from kernel import procs


@pytest.fixture(params=["ctypes", "os"])
def way(request, monkeypatch):
    """Each test on both paths; the other path fails if called, so the test is on the one it names."""
    monkeypatch.setattr(procs, "_use_ctypes", request.param == "ctypes")

    def not_this_path(*_a, **_kw):
        raise AssertionError("spawned on the other path")

    monkeypatch.setattr(procs, "_spawn_os" if request.param == "ctypes" else "_spawn_ctypes", not_this_path)
    return request.param


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


def test_fds_are_dup_d_and_others_closed_from_the_given_number(way):
    keep = os.open(os.devnull, os.O_RDONLY)  # inheritable: only close_from keeps it out
    os.set_inheritable(keep, True)
    try:
        _, out = _run(f"test -e /proc/self/fd/{keep} && echo open || echo closed")
        assert out.strip() == "open"
        _, out = _run(f"test -e /proc/self/fd/{keep} && echo open || echo closed", close_from=3)
        assert out.strip() == "closed"
    finally:
        os.close(keep)


def test_setsid_and_default_signals(way):
    pid, out = _run("ps -o sid= -p $$; grep SigIgn /proc/self/status", setsid=True,
                    default_signals=procs.RESTORED_SIGNALS)
    sid, ign = out.split("\n", 1)
    assert int(sid) == pid
    mask = int(ign.split()[1], 16)
    assert not mask & (1 << (signal.SIGPIPE - 1))  # Python ignores it; exec would keep that
    _, out = _run("grep SigIgn /proc/self/status")
    assert int(out.split()[1], 16) & (1 << (signal.SIGPIPE - 1))


def test_exec_failure_is_the_child_errno(way):
    with pytest.raises(FileNotFoundError):
        procs.spawn("/nonexistent/pause", ["pause"], [])


# what the child shows of itself, read by the shell that posix_spawn exec'd ($$) between its commands (no
# pipeline, no command substitution: those open fds of the shell's own); its signal masks last, by the
# process itself after an exec (which keeps them): the shell blocks signals while it forks each command
_SELF = "echo $$; ps -o sid= -p $$; ls -l /proc/$$/fd; exec grep -E '^Sig(Blk|Ign)' /proc/self/status"


def _child_as_pause(dup_above: int) -> tuple[dict[str, str], bool, dict[str, int]]:
    """A child spawned as the runtime spawns pause (stdin /dev/null, stdout and stderr pipes, its own
    session, fds from 3 closed, SIGPIPE/SIGXFSZ at their defaults), with one more dup2 onto
    `dup_above`: its fds (a pipe by kind), whether it leads its own session, its signal masks."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        pid = procs.spawn("/bin/sh", ["sh", "-c", _SELF],
                          [(null, 0), (out_w, 1), (err_w, 2), (null, dup_above)],
                          setsid=True, close_from=3, default_signals=procs.RESTORED_SIGNALS)
    finally:
        for fd in (null, out_w, err_w):
            os.close(fd)
    with open(out_r, "rb") as out, open(err_r, "rb") as err:
        lines, errors = out.read().decode().splitlines(), err.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, errors
    fds = {parts[-3]: "pipe" if parts[-1].startswith("pipe:") else parts[-1]
           for parts in (line.split() for line in lines if " -> " in line)}
    masks = {line.split(":")[0]: int(line.split()[1], 16) for line in lines if line.startswith("Sig")}
    return fds, lines[0].strip() == lines[1].strip() == str(pid), masks


def test_both_paths_make_the_same_child(monkeypatch):
    extra = os.open(os.devnull, os.O_RDONLY)  # inheritable: exec would keep it but for close_from
    os.set_inheritable(extra, True)
    try:
        children = []
        for use_ctypes in (True, False):
            monkeypatch.setattr(procs, "_use_ctypes", use_ctypes)
            children.append(_child_as_pause(dup_above=extra + 10))  # closefrom closes a target up there too
    finally:
        os.close(extra)
    assert children[0] == children[1]
    fds, own_session, masks = children[1]
    assert fds == {"0": "/dev/null", "1": "pipe", "2": "pipe"}
    assert own_session
    assert masks["SigBlk"] == 0
    assert not masks["SigIgn"] & ((1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1)))


def test_this_glibc_takes_the_ctypes_path():
    if (os.confstr("CS_GNU_LIBC_VERSION") or "").split(" ")[0] != "glibc" or os.uname().machine not in (
            "x86_64", "aarch64"):
        pytest.skip("the ctypes path is for glibc on x86_64/aarch64")
    assert procs._ctypes_unusable() is None


def _confstr(value):
    def confstr(name):
        if value is None:
            raise ValueError("unrecognized configuration name")
        return value
    return confstr


@pytest.mark.parametrize(("patch", "why"), [
    (lambda m: m.setattr(procs.os, "confstr", _confstr(None)), "not glibc"),
    (lambda m: m.setattr(procs.os, "confstr", _confstr("musl 1.2.4")), "not glibc"),
    (lambda m: m.setattr(procs.os, "confstr", _confstr("glibc 2.31")), "addclosefrom_np"),
    (lambda m: m.setattr(procs.os, "uname", lambda: os.uname_result(("Linux", "h", "6", "1", "riscv64"))),
     "riscv64"),
    (lambda m: m.setattr(procs, "_SYMBOLS", (*procs._SYMBOLS, "posix_spawn_no_such_np")),
     "posix_spawn_no_such_np"),
    # a struct of another size than assumed (larger only: a smaller buffer would be overrun)
    (lambda m: m.setattr(procs, "_ATTR_SIZE", procs._ATTR_SIZE + 8),
     "posix_spawnattr_t is 336 bytes, not 344"),
    (lambda m: m.setattr(procs, "_FILE_ACTIONS_SIZE", procs._FILE_ACTIONS_SIZE + 16),
     "posix_spawn_file_actions_t is 80 bytes, not 96"),
], ids=["no-confstr", "musl", "glibc-2.31", "riscv64", "missing-symbol", "attr-size", "actions-size"])
def test_a_libc_the_ctypes_path_does_not_fit_is_named(monkeypatch, patch, why):
    if procs._ctypes_unusable() is not None:
        pytest.skip("the ctypes path does not fit this libc anyway")
    patch(monkeypatch)
    assert why in (procs._ctypes_unusable() or "")


def test_the_path_is_decided_once_and_said_once(monkeypatch, caplog):
    calls = []

    def unusable():
        calls.append(1)
        return "the libc is not glibc (musl)"

    monkeypatch.setattr(procs, "_use_ctypes", None)
    monkeypatch.setattr(procs, "_ctypes_unusable", unusable)
    with caplog.at_level(logging.DEBUG, logger="nodeagent.kernel.procs"):
        for _ in range(2):
            _, out = _run("echo spawned", close_from=3)
            assert out == "spawned\n"
    assert calls == [1] and procs._use_ctypes is False
    assert [r.getMessage() for r in caplog.records] == [
        "spawn: os.posix_spawn (the GIL held): the libc is not glibc (musl)"]


@pytest.mark.parametrize("use_ctypes", [True, False])
def test_the_child_blocks_no_signal_whatever_the_spawning_thread_blocks(monkeypatch, use_ctypes):
    monkeypatch.setattr(procs, "_use_ctypes", use_ctypes)
    r, w = os.pipe()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        pid = procs.spawn("/bin/grep", ["grep", "^SigBlk", "/proc/self/status"], [(w, 1)], close_from=3)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(w)
    with open(r, "rb") as out:
        line = out.read().decode()
    os.waitpid(pid, 0)
    assert int(line.split()[1], 16) == 0, line

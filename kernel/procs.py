"""Processes: starting one without holding the GIL, and what /proc shows of them (no policy)."""

from __future__ import annotations

import ctypes
import os
import signal

_libc = ctypes.CDLL(None, use_errno=True)
_POSIX_SPAWN_SETSIGDEF = 0x04
_POSIX_SPAWN_SETSID = 0x80  # glibc's value (2.26+)
_FILE_ACTIONS_SIZE = 80  # glibc x86_64/aarch64: sizeof(posix_spawn_file_actions_t); doubled below
_ATTR_SIZE = 336  # sizeof(posix_spawnattr_t); doubled below
_SIGSET_SIZE = 128


def spawn(path: str, argv: list[str], fds: list[tuple[int, int]], *, setsid: bool = False,
          close_from: int | None = None, default_signals: tuple[int, ...] = ()) -> int:
    """Start `path` (posix_spawn: vfork and exec) and return its pid. `fds`: (fd, target) pairs dup'd
    onto the child's target numbers; `close_from`: every other fd from that number up is closed in the
    child (subprocess's close_fds); `default_signals` are reset to SIG_DFL there (subprocess's
    restore_signals: Python ignores SIGPIPE and SIGXFSZ, and exec keeps what is ignored).

    Why not os.posix_spawn or subprocess: both keep the GIL while the vfork'd child runs until its
    exec, so every other thread of the process waits for each spawn (in a burst of pod starts, with the
    child queued behind other work for a CPU, the longest GIL holds of a pod's start). Through ctypes
    the GIL is released around the call; the child and the kernel's work are the same.
    An exec failure raises OSError with the child's errno, as os.posix_spawn does."""
    actions = ctypes.create_string_buffer(2 * _FILE_ACTIONS_SIZE)
    attr = ctypes.create_string_buffer(2 * _ATTR_SIZE)
    _check(_libc.posix_spawn_file_actions_init(actions), path)
    _check(_libc.posix_spawnattr_init(attr), path)
    try:
        for fd, target in fds:
            _check(_libc.posix_spawn_file_actions_adddup2(actions, fd, target), path)
        if close_from is not None:
            _check(_libc.posix_spawn_file_actions_addclosefrom_np(actions, close_from), path)
        flags = _POSIX_SPAWN_SETSID if setsid else 0
        if default_signals:
            sigs = ctypes.create_string_buffer(_SIGSET_SIZE)
            _libc.sigemptyset(sigs)
            for sig in default_signals:
                _libc.sigaddset(sigs, int(sig))
            _check(_libc.posix_spawnattr_setsigdefault(attr, sigs), path)
            flags |= _POSIX_SPAWN_SETSIGDEF
        _check(_libc.posix_spawnattr_setflags(attr, ctypes.c_short(flags)), path)
        args = [os.fsencode(a) for a in argv]
        c_argv = (ctypes.c_char_p * (len(args) + 1))(*args, None)
        env = [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in os.environ.items()]
        c_env = (ctypes.c_char_p * (len(env) + 1))(*env, None)
        pid = ctypes.c_int()
        _check(_libc.posix_spawn(ctypes.byref(pid), os.fsencode(path), actions, attr, c_argv, c_env), path)
        return pid.value
    finally:
        _libc.posix_spawn_file_actions_destroy(actions)
        _libc.posix_spawnattr_destroy(attr)


RESTORED_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)  # what subprocess resets in its children


def _check(err: int, path: str) -> None:
    """posix_spawn's functions return the error number itself (0 on success)."""
    if err:
        raise OSError(err, os.strerror(err), path)


def alive(pid: int) -> bool:
    """`pid` exists and is not a zombie (a zombie has exited; only its parent's wait() is missing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False

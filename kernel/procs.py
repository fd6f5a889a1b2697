"""Processes: starting one without holding the GIL, and what /proc shows of them (no policy)."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading

log = logging.getLogger("nodeagent.kernel.procs")

_libc = ctypes.CDLL(None, use_errno=True)
_POSIX_SPAWN_SETSIGDEF = 0x04
_POSIX_SPAWN_SETSIGMASK = 0x08
_POSIX_SPAWN_SETSID = 0x80  # glibc's value (2.26+)
# glibc's sizes on x86_64 and aarch64 (posix/spawn.h, bits/types/__sigset_t.h): checked once against
# what this libc's init functions clear (`_ctypes_unusable`); the buffers are twice as large
_FILE_ACTIONS_SIZE = 80  # sizeof(posix_spawn_file_actions_t): 2 ints, a pointer, 16 ints of padding
_ATTR_SIZE = 336  # sizeof(posix_spawnattr_t): flags, pgrp, 2 sigset_t, sched_param, policy, 16 ints
_SIGSET_SIZE = 128  # sizeof(sigset_t): 1024 bits
_MACHINES = ("x86_64", "aarch64")
_GLIBC_CLOSEFROM = (2, 34)  # posix_spawn_file_actions_addclosefrom_np
_SYMBOLS = ("posix_spawn", "posix_spawn_file_actions_init", "posix_spawn_file_actions_destroy",
            "posix_spawn_file_actions_adddup2", "posix_spawn_file_actions_addclosefrom_np",
            "posix_spawnattr_init", "posix_spawnattr_destroy", "posix_spawnattr_setsigdefault",
            "posix_spawnattr_setsigmask", "posix_spawnattr_setflags", "sigemptyset", "sigaddset")

_detect_lock = threading.Lock()
_use_ctypes: bool | None = None  # decided at the first spawn


def spawn(path: str, argv: list[str], fds: list[tuple[int, int]], *, setsid: bool = False,
          close_from: int | None = None, default_signals: tuple[int, ...] = ()) -> int:
    """Start `path` (posix_spawn: vfork and exec) and return its pid. `fds`: (fd, target) pairs dup'd
    onto the child's target numbers; `close_from`: every other fd from that number up is closed in the
    child (subprocess's close_fds); `default_signals` are reset to SIG_DFL there (subprocess's
    restore_signals: Python ignores SIGPIPE and SIGXFSZ, and exec keeps what is ignored). The child
    blocks no signal, whatever the spawning thread blocks (exec keeps the mask: a pause or container
    started by an agent run from a shell that blocks SIGTERM would never see its stop signal).

    Why not os.posix_spawn or subprocess: both keep the GIL while the vfork'd child runs until its
    exec, so every other thread of the process waits for each spawn (in a burst of pod starts, with the
    child queued behind other work for a CPU, the longest GIL holds of a pod's start). Through ctypes
    the GIL is released around the call; the child and the kernel's work are the same. Where that path
    is not known to be right (not glibc 2.34+ on x86_64/aarch64, or its structs of another size) the
    same child is made by os.posix_spawn, GIL held (`_spawn_os`).
    An exec failure raises OSError with the child's errno, as os.posix_spawn does."""
    if _ctypes_path():
        return _spawn_ctypes(path, argv, fds, setsid, close_from, default_signals)
    return _spawn_os(path, argv, fds, setsid, close_from, default_signals)


def _ctypes_path() -> bool:
    """Whether spawns go through libc by ctypes; decided once, and said once (debug)."""
    global _use_ctypes
    if _use_ctypes is None:
        with _detect_lock:
            if _use_ctypes is None:
                why = _ctypes_unusable()
                if why is None:
                    log.debug("spawn: libc's posix_spawn by ctypes (the GIL released)")
                else:
                    log.debug("spawn: os.posix_spawn (the GIL held): %s", why)
                _use_ctypes = why is None
    return _use_ctypes


def _ctypes_unusable() -> str | None:
    """Why the ctypes path cannot be trusted on this libc, or None when it can: glibc 2.34+ (for
    addclosefrom_np) on a 64-bit x86_64/aarch64 process, with every function it calls, and the struct
    sizes it assumes. Those are measured, not only assumed: glibc's init functions memset the whole struct
    to zero, so in a buffer filled with 0xff the zeroed prefix is exactly sizeof (sigset_t's size follows
    from posix_spawnattr_t's, which holds two; sigemptyset clears only the kernel's 8 bytes of it)."""
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"; musl has no such name
    except (ValueError, OSError):
        version = None
    name, _, number = (version or "").partition(" ")
    if name != "glibc":
        return f"the libc is not glibc ({version or 'no CS_GNU_LIBC_VERSION'})"
    try:
        release = tuple(int(part) for part in number.split(".")[:2])
    except ValueError:
        return f"unreadable glibc version {number!r}"
    if release < _GLIBC_CLOSEFROM:
        return f"glibc {number} has no posix_spawn_file_actions_addclosefrom_np (2.34+)"
    machine = os.uname().machine
    if machine not in _MACHINES or ctypes.sizeof(ctypes.c_void_p) != 8:
        return f"struct sizes known for 64-bit {'/'.join(_MACHINES)} only, not {machine}"
    missing = [sym for sym in _SYMBOLS if not hasattr(_libc, sym)]
    if missing:
        return f"libc lacks {', '.join(missing)}"
    sizes = {"posix_spawn_file_actions_t": (_FILE_ACTIONS_SIZE, _libc.posix_spawn_file_actions_init,
                                            _libc.posix_spawn_file_actions_destroy),
             "posix_spawnattr_t": (_ATTR_SIZE, _libc.posix_spawnattr_init, _libc.posix_spawnattr_destroy)}
    wrong = [f"{struct} is {got} bytes, not {size}" for struct, (size, init, destroy) in sizes.items()
             if (got := _cleared(init, destroy, size)) != size]
    return "; ".join(wrong) if wrong else None


def _cleared(init: ctypes._NamedFuncPointer, destroy: ctypes._NamedFuncPointer, size: int) -> int:
    """How many leading bytes `init` zeroes in a buffer of twice `size` filled with 0xff."""
    buf = ctypes.create_string_buffer(b"\xff" * (2 * size), 2 * size)
    if init(buf):
        return -1
    cleared = 2 * size - len(buf.raw.lstrip(b"\0"))
    destroy(buf)
    return cleared


def _spawn_ctypes(path: str, argv: list[str], fds: list[tuple[int, int]], setsid: bool,
                  close_from: int | None, default_signals: tuple[int, ...]) -> int:
    actions = ctypes.create_string_buffer(2 * _FILE_ACTIONS_SIZE)
    attr = ctypes.create_string_buffer(2 * _ATTR_SIZE)
    _check(_libc.posix_spawn_file_actions_init(actions), path)
    _check(_libc.posix_spawnattr_init(attr), path)
    try:
        for fd, target in fds:
            _check(_libc.posix_spawn_file_actions_adddup2(actions, fd, target), path)
        if close_from is not None:
            _check(_libc.posix_spawn_file_actions_addclosefrom_np(actions, close_from), path)
        flags = _POSIX_SPAWN_SETSIGMASK | (_POSIX_SPAWN_SETSID if setsid else 0)
        none = ctypes.create_string_buffer(_SIGSET_SIZE)
        _libc.sigemptyset(none)
        _check(_libc.posix_spawnattr_setsigmask(attr, none), path)
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


def _spawn_os(path: str, argv: list[str], fds: list[tuple[int, int]], setsid: bool,
              close_from: int | None, default_signals: tuple[int, ...]) -> int:
    """The same child through os.posix_spawn. It has no closefrom: every fd from `close_from` up that
    exec would keep (inheritable: no FD_CLOEXEC) gets a close action after the dup2s, as do dup2 targets
    from there up (closefrom closes them too). subprocess.Popen(close_fds=True) would close them all in
    the child, but cannot dup an fd onto a number above 2 (the shim launcher's), has a fixed
    restore_signals set, and reaps its child when collected (the runtime's exit watcher must).
    An fd made inheritable by another thread between the listing and the spawn would stay open in the
    child; Python makes none so unless asked (PEP 446)."""
    actions: list[tuple[int, ...]] = [(os.POSIX_SPAWN_DUP2, fd, target) for fd, target in fds]
    if close_from is not None:
        close = {target for _, target in fds if target >= close_from}
        close.update(fd for fd in _open_fds() if fd >= close_from and _inheritable(fd))
        actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in sorted(close)]
    return os.posix_spawn(path, argv, os.environ, file_actions=actions, setsid=setsid,
                          setsigmask=(), setsigdef=default_signals)


def _open_fds() -> list[int]:
    return [int(name) for name in os.listdir("/proc/self/fd")]


def _inheritable(fd: int) -> bool:
    try:
        return os.get_inheritable(fd)
    except OSError:  # closed since the listing (the listing's own fd among them)
        return False


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

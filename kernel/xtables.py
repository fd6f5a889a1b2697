"""The kernel's legacy x_tables socket API for IPv4 (what iptables-legacy and libiptc use underneath).

Pure mechanism: GET_INFO, GET_ENTRIES, SET_REPLACE and ADD_COUNTERS on a raw socket (the socket
options go through kernel.syscalls), and the xtables lock every iptables command takes. What to
write is netproxy's (netproxy/iptables/xtblob.py edits a table's blob and replaces it through here).


A table is one blob: every write of every legacy tool is GET_ENTRIES of the whole table,
an edit in userspace, and one SET_REPLACE of the whole table. This module measures that
floor (bench/netproxy_sync.py prints it beside the tools' times): it reads a table and
writes it back unchanged, with its packet counters restored, so any legacy writer's cost
for one change is bounded below by `replace_unchanged`. Call it on a thread already in
the target network namespace (the socket belongs to the calling thread's netns).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import os
import socket
import struct
import time
from collections.abc import Iterator

from kernel import syscalls
from kernel.errors import KernelError, SyscallError

SOL_IP = 0
IPT_SO_SET_REPLACE = 64
IPT_SO_SET_ADD_COUNTERS = 65
IPT_SO_GET_INFO = 64
IPT_SO_GET_ENTRIES = 65

_INFO = struct.Struct("32sI5I5III")  # struct ipt_getinfo
_GET_ENTRIES_HDR = 40  # struct ipt_get_entries: name[32], size, pad to the u64-aligned entry table
_REPLACE = struct.Struct("32sIII5I5IIQ")  # struct ipt_replace up to entries[] (96 bytes)
_COUNTERS_HDR = struct.Struct("32sI4x")  # struct xt_counters_info up to counters[]
_COUNTER = 16  # struct xt_counters: u64 packets, u64 bytes



class XtablesError(KernelError):
    """The kernel refused an x_tables request (EAGAIN: the table changed under a replace)."""


@dataclasses.dataclass(frozen=True)
class TableInfo:
    name: str
    valid_hooks: int
    hook_entry: tuple[int, ...]
    underflow: tuple[int, ...]
    num_entries: int
    size: int


@contextlib.contextmanager
def _refused(what: str) -> Iterator[None]:
    """A failed socket option as XtablesError, named by the request."""
    try:
        yield
    except SyscallError as e:
        err = e.errno or 0
        raise XtablesError(err, f"{what}: {errno.errorcode.get(err, err)}") from None


def open_socket() -> socket.socket:
    """The raw IPv4 socket the x_tables requests go through, in the calling thread's netns."""
    return socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)


def get_info(sock: socket.socket, table: str) -> TableInfo:
    buf = ctypes.create_string_buffer(table.encode(), _INFO.size)
    with _refused(f"GET_INFO {table}"):
        syscalls.getsockopt(sock.fileno(), SOL_IP, IPT_SO_GET_INFO, buf, _INFO.size)
    name, valid, *rest = _INFO.unpack(buf.raw)
    return TableInfo(table, valid, tuple(rest[:5]), tuple(rest[5:10]), rest[10], rest[11])


def get_entries(sock: socket.socket, info: TableInfo) -> ctypes.Array:
    """The table blob, placed in a buffer at offset 96 so `replace` sends it without copying."""
    buf = ctypes.create_string_buffer(_REPLACE.size + info.size)
    at = _REPLACE.size - _GET_ENTRIES_HDR
    struct.pack_into("32sI", buf, at, info.name.encode(), info.size)
    with _refused(f"GET_ENTRIES {info.name}"):
        syscalls.getsockopt(sock.fileno(), SOL_IP, IPT_SO_GET_ENTRIES, ctypes.byref(buf, at),
                            _GET_ENTRIES_HDR + info.size)
    return buf


def get_entries_into(sock: socket.socket, info: TableInfo, buf: bytearray) -> None:
    """GET_ENTRIES straight into buf[96:96 + size] (a reusable buffer, as `get_entries` lays it out).

    The buffer is zeroed first: the kernel writes match and target names only up to their NUL,
    so a reused buffer would otherwise keep old bytes in the names' padding."""
    at = _REPLACE.size - _GET_ENTRIES_HDR
    cbuf = (ctypes.c_char * len(buf)).from_buffer(buf)
    ctypes.memset(ctypes.byref(cbuf, at), 0, _GET_ENTRIES_HDR + info.size)
    struct.pack_into("32sI", buf, at, info.name.encode(), info.size)
    try:
        with _refused(f"GET_ENTRIES {info.name}"):
            syscalls.getsockopt(sock.fileno(), SOL_IP, IPT_SO_GET_ENTRIES, ctypes.byref(cbuf, at),
                                _GET_ENTRIES_HDR + info.size)
    finally:
        del cbuf


def replace(sock: socket.socket, info: TableInfo, buf: ctypes.Array | bytearray, num_entries: int, size: int,
            hook_entry: tuple[int, ...], underflow: tuple[int, ...]) -> ctypes.Array[ctypes.c_char]:
    """SET_REPLACE with the blob at buf[96:] (a ctypes buffer, or a bytearray used in place); returns
    the old table's counters (one per old entry).

    The kernel refuses (EAGAIN) if the table's entry count is no longer `info.num_entries`,
    libiptc's guard against a concurrent writer."""
    cbuf = (ctypes.c_char * len(buf)).from_buffer(buf) if isinstance(buf, bytearray) else buf
    counters = ctypes.create_string_buffer(info.num_entries * _COUNTER)
    try:
        _REPLACE.pack_into(cbuf, 0, info.name.encode(), info.valid_hooks, num_entries, size, *hook_entry,
                           *underflow, info.num_entries, ctypes.addressof(counters))
        with _refused(f"SET_REPLACE {info.name}"):
            syscalls.setsockopt(sock.fileno(), SOL_IP, IPT_SO_SET_REPLACE, cbuf, _REPLACE.size + size)
    finally:
        del cbuf  # a bytearray can be resized again once no ctypes view holds it
    return counters


def add_counters(sock: socket.socket, table: str, counters: bytes | ctypes.Array) -> None:
    n = len(counters) // _COUNTER
    buf = ctypes.create_string_buffer(_COUNTERS_HDR.size + n * _COUNTER)
    _COUNTERS_HDR.pack_into(buf, 0, table.encode(), n)
    ctypes.memmove(ctypes.byref(buf, _COUNTERS_HDR.size), counters, n * _COUNTER)
    with _refused(f"ADD_COUNTERS {table}"):
        syscalls.setsockopt(sock.fileno(), SOL_IP, IPT_SO_SET_ADD_COUNTERS, buf, len(buf))


@dataclasses.dataclass
class ReplaceTiming:
    entries: int
    size: int
    get: float  # GET_INFO + GET_ENTRIES, seconds
    replace: float  # SET_REPLACE + ADD_COUNTERS, seconds


def replace_unchanged(table: str = "nat") -> ReplaceTiming:
    """Read `table` and write it back byte-for-byte, counters restored: the kernel's floor for
    any legacy change (iptables-legacy-restore and libiptc add parsing and re-encoding to it)."""
    with open_socket() as s:
        t0 = time.perf_counter()
        info = get_info(s, table)
        buf = get_entries(s, info)
        t1 = time.perf_counter()
        old = replace(s, info, buf, info.num_entries, info.size, info.hook_entry, info.underflow)
        add_counters(s, table, old)
        t2 = time.perf_counter()
    return ReplaceTiming(info.num_entries, info.size, t1 - t0, t2 - t1)


@contextlib.contextmanager
def xtables_lock() -> Iterator[None]:
    """The lock every iptables command takes around its read-edit-replace (iptables -w waits for it):
    without it, a concurrent same-size write by another program could be lost between our read
    and our replace (the kernel only refuses a replace if the entry count changed)."""
    path = os.environ.get("XTABLES_LOCKFILE", "/run/xtables.lock")
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)

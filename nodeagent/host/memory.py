"""Process-wide memory settings for the long-running daemons (`up`, `agent`, `server`).

Two costs dominated their resident memory beyond the code itself (measured at 110 pods, see
bench/pod_startup.py):

- asyncio gives every TLS connection a 256 KiB read buffer (SSLProtocol.max_size), written in full
  when allocated. `up` talks to its own apiserver over TLS from every component, one connection per
  watch, and the apiserver holds the other end of each: ~100 such buffers, ~25 MiB. TLS records
  carry at most 16 KiB, so a 32 KiB buffer still takes whole records per read.
- glibc gives each thread that allocates under contention its own malloc arena (up to 8 per core),
  and memory freed in one arena is not reused by another. The runtime's and CNI daemon's worker
  threads allocate briefly and rarely; two arenas serve them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("nodeagent.host.memory")

SSL_READ_BUFFER = 32 * 1024
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter number


def lean_process() -> None:
    """Apply both settings; call at start-up, before threads and connections exist."""
    import asyncio.sslproto

    if getattr(asyncio.sslproto.SSLProtocol, "max_size", 0) > SSL_READ_BUFFER:
        asyncio.sslproto.SSLProtocol.max_size = SSL_READ_BUFFER
    limit_malloc_arenas(MALLOC_ARENAS)


def limit_malloc_arenas(n: int) -> bool:
    """mallopt(M_ARENA_MAX, n) on glibc; False where the C library has no such knob (musl)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(_M_ARENA_MAX, n))
    if not ok:
        log.debug("mallopt(M_ARENA_MAX, %d) refused", n)
    return ok

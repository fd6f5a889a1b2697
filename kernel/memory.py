"""Process-wide memory settings for the long-running daemons (`up`, `agent`, `server`).

Two costs dominated their resident memory beyond the code itself (measured at 110 pods, see
bench/pod_startup.py):

- asyncio gives every TLS connection a 256 KiB read buffer (SSLProtocol.max_size), written in full
  when allocated. `up` talks to its own apiserver over TLS from every component, one connection per
  watch, and the apiserver holds the other end of each: ~150 such buffers, ~37 MiB. The buffer takes the
  socket's ciphertext and sizes each plaintext read; a TLS record carries at most 16 KiB of plaintext, so
  each read still returns a whole record (its ciphertext, 16 KiB and a few bytes, arrives in two receives).
  Measured with aiohttp's client and server over loopback TLS, one streaming response each: 164 KiB a
  connection (both ends) with 32 KiB buffers, 131 KiB with 16 KiB.
- `import pyroute2` runs the package's __init__, which imports every family it supports (NDB, IPDB,
  nl80211, wireguard, plan9, ...): ~200 modules, ~5 MiB more than the rtnetlink parts used here.
  `lean_pyroute2` puts the package in place without running that __init__; its names resolve on first
  use from the submodule that defines them, so `from pyroute2 import IPRoute` works unchanged.
- glibc gives each thread that allocates under contention its own malloc arena (up to 8 per core),
  and memory freed in one arena is not reused by another. The runtime's and CNI daemon's worker
  threads allocate briefly and rarely; two arenas serve them.

And one CPU setting of the same kind: the cyclic garbage collector's thresholds (`GC_THRESHOLDS`).
"""

from __future__ import annotations

import ast
import gc
import importlib
import importlib.util
import logging
import sys
from typing import Any

from kernel.syscalls import mallopt

log = logging.getLogger("nodeagent.kernel.memory")

SSL_READ_BUFFER = 16 * 1024
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter number
# CPython's default (700, 10, 10) collects the young generation every 700 container allocations, and the
# oldest every 100 of those: with the apiserver's caches and the informers' objects (a million at 5,000
# nodes) the full collections alone took 6 % of `server`'s CPU under SchedulingBasic, all of GC 12 %
# (bench/README, "Scheduling through the API, fourth pass"). Objects are freed by their reference counts
# either way; only cycles wait longer. Measured maxrss unchanged.
GC_THRESHOLDS = (10_000, 10, 10)


def lean_process() -> None:
    """Apply all four; call at start-up, before threads, connections and pyroute2 imports exist."""
    import asyncio.sslproto

    if getattr(asyncio.sslproto.SSLProtocol, "max_size", 0) > SSL_READ_BUFFER:
        asyncio.sslproto.SSLProtocol.max_size = SSL_READ_BUFFER
    limit_malloc_arenas(MALLOC_ARENAS)
    lean_pyroute2()
    gc.set_threshold(*GC_THRESHOLDS)


def lean_pyroute2() -> bool:
    """Register the pyroute2 package without running its __init__; each name that __init__ would import
    (`from pyroute2.X import Name`, read from its source) is imported from X when first asked for.
    False (nothing done) when pyroute2 is missing or already imported."""
    if "pyroute2" in sys.modules:
        return False
    spec = importlib.util.find_spec("pyroute2")
    if spec is None or spec.origin is None or not spec.submodule_search_locations:
        return False
    try:
        with open(spec.origin, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return False
    where = {a.asname or a.name: n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
             and n.module and n.module.startswith("pyroute2.") for a in n.names}
    mod = importlib.util.module_from_spec(spec)

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module 'pyroute2' has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        setattr(mod, name, value)
        return value

    vars(mod)["__getattr__"] = __getattr__  # PEP 562: looked up in the module's namespace
    sys.modules["pyroute2"] = mod
    return True


def limit_malloc_arenas(n: int) -> bool:
    """mallopt(M_ARENA_MAX, n) on glibc; False where the C library has no such knob (musl)."""
    ok = mallopt(_M_ARENA_MAX, n)
    if not ok:
        log.debug("mallopt(M_ARENA_MAX, %d) refused", n)
    return ok

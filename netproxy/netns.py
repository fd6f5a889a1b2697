"""A single worker thread living in one network namespace, for every blocking kernel call of a proxier.

setns(2) applies to the calling thread only; doing it on a dedicated thread that
never leaves keeps the event loop's thread (and every other thread) where it was.
Child processes forked from this thread (iptables-restore, conntrack) inherit its netns.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
from collections.abc import Callable
from typing import Any, TypeVar

CLONE_NEWNET = 0x40000000
T = TypeVar("T")
_libc = ctypes.CDLL(None, use_errno=True)


def setns_thread(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def netns_path(netns: str | None) -> str | None:
    if not netns:
        return None
    return netns if netns.startswith("/") else f"/run/netns/{netns}"


class NetnsWorker:
    """Runs callables on one thread inside `netns` (None: the process's own namespace)."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        path = netns_path(netns)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"netns-{netns or 'host'}",
            initializer=(setns_thread if path else None), initargs=((path,) if path else ()))

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        return self._pool.submit(fn, *args)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        return self._pool.submit(fn, *args).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)

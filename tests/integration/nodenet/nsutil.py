"""Running a function inside a named network namespace (a thread that setns's there: its subprocesses too)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from kernel import netns

T = TypeVar("T")


def in_ns(ns: str, fn: Callable[[], T]) -> T:
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return netns.run_in(fd, fn)
    finally:
        os.close(fd)

"""Polling for a condition in async tests: the one place tests wait for the cluster to converge."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def eventually(fn: Callable[[], Awaitable[Any]], within: float = 30.0, interval: float = 0.1) -> Any:
    """Await `fn` until it returns something truthy and return that;
    fail with the last answer after `within` s."""
    deadline = time.monotonic() + within
    last = None
    while time.monotonic() < deadline:
        last = await fn()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not reached in {within}s (last: {last!r})")

"""run_to_completion: a cancelled caller still sees its call through, queued or running, and only then is
cancelled; results and errors come back as from asyncio.to_thread."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from kernel.threads import run_to_completion


def _add(a: int, b: int = 0) -> int:
    return a + b


async def test_result_and_error_come_back():
    assert await run_to_completion(_add, 2, b=3) == 5

    def boom() -> None:
        raise OSError(16, "busy")

    with pytest.raises(OSError, match="busy"):
        await run_to_completion(boom)


async def test_a_queued_call_still_runs_when_its_caller_is_cancelled():
    """One busy thread: the call waits in the queue when the cancel comes; asyncio.to_thread would drop it,
    this runs it, and the caller's CancelledError comes after."""
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(pool)
    busy, ran = threading.Event(), threading.Event()
    try:
        blocker = loop.run_in_executor(None, busy.wait, 10)
        caller = asyncio.create_task(run_to_completion(ran.set))
        await asyncio.sleep(0.05)
        caller.cancel()
        await asyncio.sleep(0.05)
        assert not caller.done()  # waiting for its call, through the cancel
        caller.cancel()  # a second cancel does not cut the wait short either
        await asyncio.sleep(0.05)
        assert not caller.done() and not ran.is_set()
        busy.set()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert ran.is_set()
        await blocker
    finally:
        busy.set()
        pool.shutdown(wait=True)

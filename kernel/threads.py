"""Blocking kernel work off the event loop that a cancelled caller cannot outrun.

`asyncio.to_thread` hands a call to a worker thread; cancelling the awaiting task does not stop a call
that already runs there (it finishes later, unseen) and silently drops one still queued. For a step that
makes or removes kernel state (a mount, a directory, an unmount) both are wrong: the caller's cleanup runs
before the mount it undoes exists, or a teardown never happens. `run_to_completion` lets the call finish
and only then passes the cancel on, so whatever cleans up after the caller sees the step's effect.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def run_to_completion(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` on the loop's default executor; when the caller is cancelled meanwhile, wait
    (through further cancels) until the call has finished, then raise CancelledError."""
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()
    fut = loop.run_in_executor(None, functools.partial(ctx.run, fn, *args, **kwargs))
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        await finish(fut)
        raise


async def finish(fut: asyncio.Future[T]) -> None:
    """Wait until `fut` is done whatever its outcome, absorbing cancels meanwhile (the caller re-raises its
    own); the call behind it is bounded, so this ends."""
    while not fut.done():
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            continue
        except Exception:  # its error is its caller's concern; this only waits
            return
    if not fut.cancelled():
        fut.exception()  # retrieved: no "exception was never retrieved" warning


__all__ = ["finish", "run_to_completion"]

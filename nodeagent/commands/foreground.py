"""Daemons run in the foreground (`nodeagent cri`, `nodeagent csi`): served until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from typing import Any


def serve_until_signal(serve: Callable[[asyncio.Event], Awaitable[Any]]) -> int:
    """asyncio.run `serve(ready)`; SIGINT or SIGTERM cancels it, which is a clean stop (exit status 0)."""

    async def main() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # main() runs as asyncio.run's task
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await serve(asyncio.Event())
        except asyncio.CancelledError:
            pass
        return 0

    return asyncio.run(main())

"""The periodic compactor the apiserver runs beside its store, as kube-apiserver does every 5 minutes.

Each round compacts to the revision that was current one interval ago, so a watcher
can always resume from anything it saw in the last interval, while never touching
the most recent `keep` revisions (a burst of writes still leaves room to resume).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from nodeagent.store.base import Store, StoreError

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 300.0
DEFAULT_KEEP = 1000


def compaction_target(previous: int, current: int, compacted: int, keep: int) -> int | None:
    """The revision to compact to this round, or None if there is nothing to forget."""
    target = min(previous, current - keep)
    return target if target > compacted else None


async def run_compactor(
    store: Store,
    *,
    interval: float = DEFAULT_INTERVAL,
    keep: int = DEFAULT_KEEP,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> None:
    """Compact `store` forever (cancel the task to stop). Errors are logged and retried next round."""
    previous = store.revision
    while True:
        await sleep(interval)
        target = compaction_target(previous, store.revision, store.compacted, keep)
        if target is not None:
            try:
                await store.compact(target)
                log.info("store compacted at revision %d", target)
            except StoreError as e:
                log.warning("store compaction at %d failed: %s", target, e)
        previous = store.revision

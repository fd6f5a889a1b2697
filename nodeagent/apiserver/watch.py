"""Watch semantics over the watch cache: initial ADDED events, selector transitions, bookmarks, timeout, 410.

Yields batches of (type, object, line): `line` is the pre-encoded JSON event when the watcher sees the
event unchanged (plain JSON, same type), so a hundred watchers cost one encoding; a batch is everything
that was ready at once, written to the client in one write.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any

from nodeagent.api.resources import Resource
from nodeagent.api.selectors import FieldRequirement, Selector
from nodeagent.apiserver import errors
from nodeagent.apiserver.cache import CachedEvent, WatchCache
from nodeagent.apiserver.list_options import parse_rv
from nodeagent.apiserver.registry import matches
from nodeagent.clock import REAL_CLOCK, Clock

BOOKMARK_INTERVAL = 10.0
FRESH_WAIT_S = 3.0  # the watch cache's blockTimeout: how long a read waits for a revision it has not reached
TOO_LARGE_RETRY_S = 1  # resourceVersionTooHighRetrySeconds


async def watch_events(cache: WatchCache, res: Resource, ns: str | None, labels: Selector | None,
                       fields: tuple[FieldRequirement, ...], resource_version: str | None,
                       timeout_s: float | None, bookmarks: bool, send_initial: bool | None = None,
                       bookmark_interval: float = BOOKMARK_INTERVAL,
                       direct: Callable[[bytes], bool] | None = None, clock: Clock = REAL_CLOCK,
                       ) -> AsyncGenerator[list[tuple[str, dict[str, Any], bytes | None]], None]:
    """`direct`: for a plain watcher, a synchronous writer the cache may call with each event's line once
    the stream has caught up (see Subscriber.direct); events before that come through the batches.

    The cacher's start (1.32): with initial events (`send_initial`, or a legacy watch from "" or "0"),
    the state once the cache has reached the store's revision (""), any (`0`), or N (waiting up to 3 s,
    else an ERROR event "Too large resource version"), then changes; without, changes after the store's
    revision (""), the cache's ("0"), or N. A WatchList (`send_initial` with `bookmarks`) gets the
    `k8s.io/initial-events-end` bookmark at the snapshot's revision after its initial events."""
    resource_version = resource_version or ""
    rv = parse_rv(resource_version)
    initial = send_initial if send_initial is not None else rv == 0
    prefix = res.key_prefix(ns)
    ns_field = next((f.value for f in fields if f.field == "metadata.namespace" and f.op == "="), None)
    if res.namespaced and not ns and ns_field:
        prefix = res.key_prefix(ns_field)
    plain = (labels is None or labels.is_everything) and not fields
    if resource_version == "":
        await cache.wait_fresh()
    elif initial and rv:
        try:
            await cache.wait_for(rv, FRESH_WAIT_S)
        except TimeoutError:
            status = errors.too_large_resource_version(rv, cache.rev, TOO_LARGE_RETRY_S).status()
            yield [("ERROR", status, None)]
            return
    since: int | None = None if initial else (rv or cache.rev)
    deadline = clock.monotonic() + timeout_s if timeout_s else None
    sub = cache.subscribe(prefix, since, initial)
    end_bookmark = bool(send_initial) and bookmarks
    direct = direct if plain else None
    queue = sub.queue
    last_rev = since or 0
    try:
        next_bookmark = clock.monotonic() + bookmark_interval
        while True:
            now = clock.monotonic()
            wait = next_bookmark - now if bookmarks else None
            if deadline is not None:
                left = deadline - now
                if left <= 0:
                    return
                wait = left if wait is None else min(wait, left)
            if direct is not None and sub.direct is None and queue.empty():
                sub.direct = direct  # caught up: from now on the cache writes our events itself
            try:
                async with asyncio.timeout(wait):  # not wait_for: on 3.11 it can lose a cancel (and an item)
                    item = await queue.get()
            except TimeoutError:
                if bookmarks and clock.monotonic() >= next_bookmark:
                    if queue.empty():
                        last_rev = max(last_rev, cache.rev)
                    yield [("BOOKMARK", _bookmark(res, last_rev), None)]
                    next_bookmark = clock.monotonic() + bookmark_interval
                continue
            batch: list[tuple[str, dict[str, Any], bytes | None]] = []
            stop = False
            while True:  # everything already queued goes out in one write
                if item is None:
                    stop = True
                    break
                if isinstance(item, CachedEvent):
                    ev = item
                    last_rev = ev.revision
                    if plain:
                        batch.append((ev.type, ev.obj, ev.line))
                    else:
                        typ = transition(ev.type, ev.obj, ev.prev, labels, fields)
                        if typ is not None:
                            batch.append((typ, ev.obj, ev.line if typ == ev.type else None))
                elif item[0] == "gone":
                    too_old, oldest = item[1]
                    status = errors.gone(f"too old resource version: {too_old} ({oldest})").status()
                    batch.append(("ERROR", status, None))
                    stop = True
                    break
                elif item[0] == "initial":
                    if matches(item[1].obj, labels, fields):
                        batch.append(("ADDED", item[1].obj, None))
                else:
                    last_rev = item[1]
                    if end_bookmark:
                        batch.append(("BOOKMARK", _bookmark(res, last_rev, initial_done=True), None))
                if queue.empty() or len(batch) >= 256:
                    break
                item = queue.get_nowait()
            if batch:
                yield batch
            if stop:
                return
    finally:
        cache.unsubscribe(sub)


def transition(typ: str, obj: dict[str, Any], prev: dict[str, Any] | None, labels: Selector | None,
               fields: tuple[FieldRequirement, ...]) -> str | None:
    """The event type this watcher sees: an object moving into or out of the selection is ADDED or DELETED."""
    now = matches(obj, labels, fields)
    if typ == "ADDED":
        return "ADDED" if now else None
    if typ == "DELETED":
        return "DELETED" if now or (prev is not None and matches(prev, labels, fields)) else None
    before = matches(prev, labels, fields) if prev is not None else now
    if now and before:
        return "MODIFIED"
    if now:
        return "ADDED"
    if before:
        return "DELETED"
    return None


def _bookmark(res: Resource, rev: int, initial_done: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": str(rev)}
    if initial_done:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta}

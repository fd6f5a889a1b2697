"""Watch semantics over the store: initial ADDED events, selector transitions, bookmarks, timeout, 410.

Produces (type, object) pairs; the HTTP handler encodes them (plain or as one-row Tables).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from nodeagent.api.selectors import FieldRequirement, Selector
from nodeagent.apiserver import errors
from nodeagent.apiserver.registry import matches
from nodeagent.apiserver.resources import Resource
from nodeagent.store import base as store_base

BOOKMARK_INTERVAL = 10.0


def _parse_rv(rv: str | None) -> int | None:
    if rv in (None, "", "0"):
        return None
    try:
        return int(rv)  # type: ignore[arg-type]
    except ValueError:
        raise errors.bad_request(f"invalid resource version: {rv}") from None


async def watch_events(store: store_base.Store, res: Resource, ns: str | None, labels: Selector | None,
                       fields: tuple[FieldRequirement, ...], resource_version: str | None,
                       timeout_s: float | None, bookmarks: bool, send_initial: bool | None = None,
                       bookmark_interval: float = BOOKMARK_INTERVAL) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    since = _parse_rv(resource_version)
    prefix = res.key_prefix(ns)
    ns_field = next((f.value for f in fields if f.field == "metadata.namespace" and f.op == "="), None)
    if res.namespaced and not ns and ns_field:
        prefix = res.key_prefix(ns_field)
    deadline = time.monotonic() + timeout_s if timeout_s else None
    initial: list[dict[str, Any]] = []
    if since is None or send_initial:
        items, rev = await store.list(prefix)
        initial = [o for o in items if matches(o, labels, fields)]
        since = rev
    last_rev = since
    for o in initial:
        yield "ADDED", o
    if send_initial and bookmarks:
        yield "BOOKMARK", _bookmark(res, last_rev, initial_done=True)
    queue: asyncio.Queue = asyncio.Queue()

    async def pump() -> None:
        try:
            async for ev in store.watch(prefix, since):
                queue.put_nowait(ev)
        except store_base.Gone as e:
            queue.put_nowait(e)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a broken backend ends the stream; the client re-watches
            queue.put_nowait(e)
        queue.put_nowait(None)

    task = asyncio.get_running_loop().create_task(pump())
    try:
        next_bookmark = time.monotonic() + bookmark_interval
        while True:
            now = time.monotonic()
            wait = next_bookmark - now if bookmarks else None
            if deadline is not None:
                left = deadline - now
                if left <= 0:
                    return
                wait = left if wait is None else min(wait, left)
            try:
                ev = await asyncio.wait_for(queue.get(), wait) if wait is not None else await queue.get()
            except TimeoutError:
                if bookmarks and time.monotonic() >= next_bookmark:
                    yield "BOOKMARK", _bookmark(res, last_rev)
                    next_bookmark = time.monotonic() + bookmark_interval
                continue
            if ev is None:
                return
            if isinstance(ev, store_base.Gone):
                yield "ERROR", errors.gone(f"too old resource version: {ev.requested} ({ev.compacted})").status()
                return
            if isinstance(ev, Exception):
                yield "ERROR", errors.internal(str(ev)).status()
                return
            last_rev = ev.revision
            typ = _transition(ev, labels, fields)
            if typ is not None:
                yield typ, ev.object
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


def _transition(ev: store_base.Event, labels: Selector | None, fields: tuple[FieldRequirement, ...]) -> str | None:
    """The event type this watcher sees: an object moving into or out of the selection is ADDED or DELETED."""
    if (labels is None or labels.is_everything) and not fields:
        return ev.type
    now = matches(ev.object, labels, fields)
    if ev.type == "ADDED":
        return "ADDED" if now else None
    if ev.type == "DELETED":
        return "DELETED" if now or (ev.prev is not None and matches(ev.prev, labels, fields)) else None
    before = matches(ev.prev, labels, fields) if ev.prev is not None else now
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

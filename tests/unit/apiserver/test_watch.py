"""Watch semantics over the watch cache: initial state, selector transitions, bookmarks, timeout, 410."""

import asyncio

from nodeagent.api.resources import builtin
from nodeagent.api.selectors import parse_label_selector
from nodeagent.apiserver.cache import WatchCache
from nodeagent.apiserver.registry import Registry
from nodeagent.apiserver.watch import watch_events
from nodeagent.store.memory import MemoryStore

NS, CMS = builtin("", "v1", "namespaces"), builtin("", "v1", "configmaps")


async def setup():
    store = MemoryStore()
    reg = Registry(store)
    await reg.create(NS, None, {"metadata": {"name": "d"}})
    cache = WatchCache(store)
    await cache.start()
    return reg, cache


async def collect(gen, n: int, limit: float = 5.0) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    async with asyncio.timeout(limit):
        async for batch in gen:
            for typ, obj, _ in batch:
                out.append((typ, obj["metadata"].get("name", obj["metadata"].get("resourceVersion"))))
            if len(out) >= n:
                break
    await gen.aclose()
    return out


async def test_initial_then_label_transitions():
    reg, cache = await setup()
    await reg.create(CMS, "d", {"metadata": {"name": "a", "labels": {"x": "1"}}})
    await reg.create(CMS, "d", {"metadata": {"name": "b"}})
    gen = watch_events(cache, CMS, "d", parse_label_selector("x=1"), (), None, None, False)
    task = asyncio.create_task(collect(gen, 4))
    await asyncio.sleep(0.05)
    b = await reg.get(CMS, "d", "b")
    b["metadata"]["labels"] = {"x": "1"}
    await reg.update(CMS, "d", "b", b)  # enters the selection: ADDED
    a = await reg.get(CMS, "d", "a")
    a["metadata"]["labels"] = {"x": "2"}
    await reg.update(CMS, "d", "a", a)  # leaves it: DELETED
    await reg.delete(CMS, "d", "b")
    assert await task == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a"), ("DELETED", "b")]
    await cache.stop()


async def test_bookmarks_timeout_and_gone():
    reg, cache = await setup()
    o = await reg.create(CMS, "d", {"metadata": {"name": "a"}})
    rv = o["metadata"]["resourceVersion"]
    gen = watch_events(cache, CMS, "d", None, (), rv, 0.5, True, bookmark_interval=0.1)
    got = await collect(gen, 100, limit=3)
    assert got and all(t == "BOOKMARK" for t, _ in got)  # then the stream ended at its timeout
    assert got[-1][1] == str(cache.rev)
    await reg.store.compact(reg.store.revision)
    gen = watch_events(cache, CMS, "d", None, (), "1", None, False)
    got = await collect(gen, 1)
    assert got[0][0] == "ERROR"
    await cache.stop()


async def test_a_watcher_that_cannot_keep_up_is_ended():
    reg, cache = await setup()
    cache.max_backlog = 5
    sub = cache.subscribe(CMS.key_prefix("d"), cache.rev)
    for i in range(10):
        await reg.create(CMS, "d", {"metadata": {"name": f"c{i}"}})
    await asyncio.sleep(0.05)
    items = []
    while not sub.queue.empty():
        items.append(sub.queue.get_nowait())
    assert items[-1] is None and len(items) <= 7  # synced + 5 events + the end
    await cache.stop()


async def test_caught_up_watchers_are_written_directly_until_the_connection_backs_up():
    reg, cache = await setup()
    written: list[bytes] = []
    accept = True

    def direct(data: bytes) -> bool:
        if accept:
            written.append(data)
        return accept

    gen = watch_events(cache, CMS, "d", None, (), str(cache.rev), None, False, direct=direct)
    task = asyncio.create_task(collect(gen, 100, limit=3))
    await asyncio.sleep(0.05)  # caught up: the generator handed its subscriber to the cache
    await reg.create(CMS, "d", {"metadata": {"name": "a"}})
    await reg.create(CMS, "d", {"metadata": {"name": "b"}})
    await cache.wait_fresh()
    assert [b'"name":"a"' in w for w in written] == [True, False] and b'"name":"b"' in written[1]
    assert all(w.startswith(b'{"type":"ADDED"') and w.endswith(b"\n") for w in written)
    accept = False
    await reg.create(CMS, "d", {"metadata": {"name": "c"}})  # the connection is backed up: the watch ends
    assert await asyncio.wait_for(task, 3) == []
    await cache.stop()


async def test_window_keeps_what_can_still_be_served_and_one_copy_of_each_object():
    reg, cache = await setup()
    a = await reg.create(CMS, "d", {"metadata": {"name": "a"}, "data": {"v": "1"}})
    a["data"] = {"v": "2"}
    await reg.update(CMS, "d", "a", a)
    await cache.wait_fresh()
    update = cache._events[-1]
    assert update.type == "MODIFIED" and update.prev["data"] == {"v": "1"}
    assert update.prev is cache._events[-2].obj  # the previous version's dict, not a second decoded copy
    at = update.revision
    await reg.store.compact(at)
    await reg.create(CMS, "d", {"metadata": {"name": "b"}})
    await cache.wait_fresh()
    assert [e.revision for e in cache._events] == [cache.rev]  # at or below the compaction: never served
    gen = watch_events(cache, CMS, "d", None, (), str(at), None, False)  # from the compaction point: served
    assert await collect(gen, 1) == [("ADDED", "b")]
    gen = watch_events(cache, CMS, "d", None, (), str(at - 1), None, False)
    assert (await collect(gen, 1))[0][0] == "ERROR"
    await cache.stop()


async def test_wait_fresh_waits_for_the_stores_writes_and_times_out_when_the_cache_lags():
    reg, cache = await setup()
    waits = [asyncio.ensure_future(cache.wait_fresh()) for _ in range(3)]
    await reg.create(CMS, "d", {"metadata": {"name": "a"}})
    later = asyncio.ensure_future(cache.wait_fresh())  # a waiter for the write above
    await asyncio.wait_for(asyncio.gather(*waits, later), 5)
    assert cache.rev == reg.store.revision and cache.get(CMS.key("d", "a")) is not None
    await cache.stop()  # the cache no longer follows the store: a waiter gives up at its limit
    await reg.create(CMS, "d", {"metadata": {"name": "b"}})
    gone = asyncio.ensure_future(cache.wait_fresh(0.1))
    cancelled = asyncio.ensure_future(cache.wait_fresh(0.1))
    await asyncio.sleep(0)
    cancelled.cancel()
    done, _ = await asyncio.wait({gone}, timeout=5)
    assert done == {gone} and isinstance(gone.exception(), TimeoutError)
    assert cancelled.cancelled() and not cache._waiters


async def raw_events(gen, n: int, limit: float = 5.0) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = []
    async with asyncio.timeout(limit):
        async for batch in gen:
            out += [(typ, obj) for typ, obj, _ in batch]
            if len(out) >= n:
                break
    await gen.aclose()
    return out


async def test_watchlist_ends_its_initial_events_with_the_annotated_bookmark_at_the_snapshot():
    """client-go's WatchList: sendInitialEvents with bookmarks gets the state, then a BOOKMARK annotated
    k8s.io/initial-events-end at the revision the state is at, then changes after it."""
    reg, cache = await setup()
    await reg.create(CMS, "d", {"metadata": {"name": "a"}})
    await reg.create(CMS, "d", {"metadata": {"name": "b"}})
    gen = watch_events(cache, CMS, "d", None, (), "", None, True, send_initial=True)
    task = asyncio.create_task(raw_events(gen, 4))
    await asyncio.sleep(0.05)
    snapshot_rev = cache.rev
    c = await reg.create(CMS, "d", {"metadata": {"name": "c"}})
    got = await task
    assert [(t, o["metadata"].get("name")) for t, o in got] == [
        ("ADDED", "a"), ("ADDED", "b"), ("BOOKMARK", None), ("ADDED", "c")]
    mark = got[2][1]
    assert mark["metadata"] == {"resourceVersion": str(snapshot_rev),
                                "annotations": {"k8s.io/initial-events-end": "true"}}
    assert mark["kind"] == "ConfigMap" and int(c["metadata"]["resourceVersion"]) > snapshot_rev
    # without initial events, from "0": only changes after the cache's revision; no end bookmark
    gen = watch_events(cache, CMS, "d", None, (), "0", None, True, send_initial=False)
    task = asyncio.create_task(raw_events(gen, 1))
    await asyncio.sleep(0.05)
    await reg.create(CMS, "d", {"metadata": {"name": "e"}})
    assert [(t, o["metadata"]["name"]) for t, o in await task] == [("ADDED", "e")]
    await cache.stop()


async def test_watchlist_from_a_revision_not_reached_ends_with_too_large(monkeypatch):
    from nodeagent.apiserver import watch as watch_mod

    monkeypatch.setattr(watch_mod, "FRESH_WAIT_S", 0.1)
    reg, cache = await setup()
    ahead = cache.rev + 50
    gen = watch_events(cache, CMS, "d", None, (), str(ahead), None, True, send_initial=True)
    (typ, st), = await raw_events(gen, 1)
    assert typ == "ERROR" and (st["code"], st["reason"]) == (504, "Timeout")
    assert st["message"] == f"Timeout: Too large resource version: {ahead}, current: {cache.rev}"
    await cache.stop()

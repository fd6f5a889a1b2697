"""The store contract, run against every backend that needs no external service.

tests/integration/store/ runs this same module against etcd (its `make_store` fixture
overrides the one here), so every case must hold for every backend.
"""

import asyncio
import contextlib

import pytest

from nodeagent.store.base import AlreadyExists, Conflict, FutureRevision, Gone, NotFound, Store
from nodeagent.store.memory import MemoryStore
from nodeagent.store.sqlite import SQLiteStore


@pytest.fixture(params=["memory", "sqlite"])
async def make_store(request, tmp_path):
    """A factory of started stores (kwargs: watch_queue); all closed at the end of the test."""
    opened = []

    async def make(**kw):
        s: MemoryStore | SQLiteStore
        if request.param == "memory":
            s = MemoryStore(**kw)
        else:
            s = SQLiteStore(str(tmp_path / "store.db"), **kw)
        await s.start()
        opened.append(s)
        return s

    yield make
    for s in opened:
        await s.close()


@pytest.fixture
async def store(make_store):
    return await make_store()


def pod(name, **extra):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, **extra}


def rv(obj):
    return int(obj["metadata"]["resourceVersion"])


async def collect(store, prefix, since, n, limit=60.0):
    """The first `n` events of a watch, as (type, key, revision)."""
    out = []

    async def run():
        async for ev in store.watch(prefix, since):
            out.append((ev.type, ev.key, ev.revision))
            if len(out) == n:
                return

    await asyncio.wait_for(run(), limit)
    return out


async def started_watch(store, prefix, since):
    """A watch iterator that is already subscribed (its generator has run up to the first wait)."""
    it = store.watch(prefix, since).__aiter__()
    first = asyncio.ensure_future(it.__anext__())
    for _ in range(20):  # let the backend subscribe (a backlog read may take a thread hop)
        await asyncio.sleep(0.01)
    return it, first


async def test_is_a_store(store):
    assert isinstance(store, Store)


async def test_create_get_update_delete(store):
    a = await store.create("/pods/default/a", pod("a"))
    rev = rv(a)
    assert rev == store.revision
    with pytest.raises(AlreadyExists):
        await store.create("/pods/default/a", pod("a"))
    got = await store.get("/pods/default/a")
    assert got == a
    b = await store.update("/pods/default/a", pod("a", spec={"x": 1}), expected_revision=rev)
    assert rv(b) > rev
    with pytest.raises(Conflict):
        await store.update("/pods/default/a", pod("a"), expected_revision=rev)
    gone = await store.delete("/pods/default/a")
    assert gone["spec"] == {"x": 1}
    with pytest.raises(NotFound):
        await store.get("/pods/default/a")
    with pytest.raises(NotFound):
        await store.delete("/pods/default/a")


async def test_update_of_missing_key_is_not_found(store):
    with pytest.raises(NotFound):
        await store.update("/pods/default/none", pod("none"))
    with pytest.raises(NotFound):
        await store.update("/pods/default/none", pod("none"), expected_revision=1)


async def test_returned_objects_are_copies_and_stale_resource_version_is_replaced(store):
    obj = pod("a")
    obj["metadata"]["resourceVersion"] = "999999"
    a = await store.create("/p/a", obj)
    assert rv(a) == store.revision != 999999
    a["spec"] = {"mutated": True}
    obj["spec"] = {"mutated": True}
    got = await store.get("/p/a")
    assert "spec" not in got and rv(got) == rv(a)
    got["metadata"]["name"] = "changed"
    assert (await store.get("/p/a"))["metadata"]["name"] == "a"


async def test_an_owned_update_is_stored_and_watched_as_any_update(store):
    """`owned=True` (the bind hands over an object built from its own copy): the same stored state, revision,
    event and precondition as a plain update."""
    since = store.revision
    a = await store.create("/p/a", pod("a", spec={"v": 1}))
    with pytest.raises(Conflict):
        await store.update("/p/a", pod("a", spec={"v": 9}), rv(a) + 5, owned=True)
    new = pod("a", spec={"v": 2}, status={"conditions": [{"type": "PodScheduled"}]})
    await store.update("/p/a", new, rv(a), owned=True)
    got = await store.get("/p/a")
    assert got["spec"] == {"v": 2} and rv(got) == store.revision
    got["spec"]["v"] = 3  # what get hands out is still the caller's own
    assert (await store.get("/p/a"))["spec"] == {"v": 2}
    events = []
    async for ev in store.watch("/p/", since):
        events.append(ev)
        if len(events) == 2:
            break
    assert events[1].type == "MODIFIED" and events[1].object["spec"] == {"v": 2} and events[1].prev == a


async def test_list_by_prefix_with_revision(store):
    for n in ("b", "a", "c"):
        await store.create(f"/pods/default/{n}", pod(n))
    await store.create("/pods/other/z", pod("z"))
    items, rev = await store.list("/pods/default/")
    assert [i["metadata"]["name"] for i in items] == ["a", "b", "c"]
    assert rev == store.revision
    everything, _ = await store.list("")
    assert len(everything) == 4
    assert (await store.list("/nothing/"))[0] == []


async def test_list_at_a_revision_is_the_state_then(store):
    """etcd's range at a revision: what an exact list and a continue read (kube's storage contract)."""
    a = await store.create("/pods/default/a", pod("a", spec={"v": 1}))
    await store.create("/pods/default/b", pod("b"))
    await store.create("/pods/other/z", pod("z"))
    at = store.revision
    await store.update("/pods/default/a", pod("a", spec={"v": 2}))
    await store.delete("/pods/default/b")
    await store.create("/pods/default/c", pod("c"))
    then = await store.list_at("/pods/default/", at)
    assert [(o["metadata"]["name"], o.get("spec")) for o in then] == [("a", {"v": 1}), ("b", None)]
    assert rv(then[0]) == rv(a)  # each object at its own revision then
    now = await store.list_at("/pods/default/", store.revision)
    assert [o["metadata"]["name"] for o in now] == ["a", "c"]
    assert [o["metadata"]["name"] for o in await store.list_at("/pods/", at)] == ["a", "b", "z"]
    with pytest.raises(FutureRevision):
        await store.list_at("/pods/default/", store.revision + 1000)
    await store.compact(at + 1)
    with pytest.raises(Gone):
        await store.list_at("/pods/default/", at)


async def test_delete_with_precondition(store):
    a = await store.create("/p/a", pod("a"))
    b = await store.update("/p/a", pod("a", spec={"v": 2}))
    with pytest.raises(Conflict):
        await store.delete("/p/a", expected_revision=rv(a))
    assert (await store.get("/p/a"))["spec"] == {"v": 2}
    last = await store.delete("/p/a", expected_revision=rv(b))
    assert rv(last) == store.revision > rv(b)
    assert last["spec"] == {"v": 2}
    with pytest.raises(NotFound):
        await store.delete("/p/a", expected_revision=rv(b))


async def test_events_carry_objects_and_previous_state(store):
    since = store.revision
    a = await store.create("/p/a", pod("a"))
    b = await store.update("/p/a", pod("a", spec={"v": 2}))
    d = await store.delete("/p/a")
    events = []
    async for ev in store.watch("/p/", since):
        events.append(ev)
        if len(events) == 3:
            break
    added, modified, deleted = events
    assert (added.type, added.object, added.prev) == ("ADDED", a, None)
    assert (modified.type, modified.object, modified.prev) == ("MODIFIED", b, a)
    assert (deleted.type, deleted.object, rv(deleted.object)) == ("DELETED", d, deleted.revision)
    assert deleted.prev == b


async def test_watch_replays_then_follows_without_gaps(store):
    await store.create("/k/1", pod("1"))
    since = store.revision
    await store.create("/k/2", pod("2"))
    seen = []

    async def consume():
        async for ev in store.watch("/k/", since):
            seen.append((ev.type, ev.object["metadata"]["name"], ev.revision))
            if len(seen) == 3:
                return

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)
    await store.update("/k/2", pod("2", spec={}))
    await store.delete("/k/1")
    await asyncio.wait_for(task, 5)
    assert [s[:2] for s in seen] == [("ADDED", "2"), ("MODIFIED", "2"), ("DELETED", "1")]
    revs = [s[2] for s in seen]
    assert revs == sorted(revs) and len(set(revs)) == 3


async def test_watch_from_zero_starts_at_the_current_revision(store):
    for i in range(3):
        await store.create(f"/k/{i}", pod(str(i)))
    it, first = await started_watch(store, "/k/", 0)
    try:
        await store.create("/k/new", pod("new"))
        ev = await asyncio.wait_for(first, 5)
        assert (ev.type, ev.key, ev.revision) == ("ADDED", "/k/new", store.revision)
    finally:
        await it.aclose()


async def test_watch_from_a_future_revision_starts_after_it(store):
    await store.create("/f/0", pod("0"))
    since = store.revision + 2
    task = asyncio.create_task(collect(store, "/f/", since, 1))
    await asyncio.sleep(0.05)
    for i in range(1, 4):
        await store.create(f"/f/{i}", pod(str(i)))
    assert await task == [("ADDED", "/f/3", since + 1)]


async def test_watch_of_one_key_and_of_a_prefix(store):
    since = store.revision
    for k in ("/k/a", "/k/ab", "/k/b", "/other/a"):
        await store.create(k, pod(k))
    await store.update("/k/a", pod("a2"))
    exact = [e for e in await collect(store, "/k/a", since, 3) if e[1] == "/k/a"]
    assert [e[0] for e in exact] == ["ADDED", "MODIFIED"]
    # A prefix is a plain string prefix: "/k/a" also matches "/k/ab"; callers end prefixes with "/".
    assert [e[1] for e in await collect(store, "/k/a", since, 3)] == ["/k/a", "/k/ab", "/k/a"]
    assert [e[1] for e in await collect(store, "/k/", since, 4)] == ["/k/a", "/k/ab", "/k/b", "/k/a"]


async def test_watch_from_compacted_revision_is_gone(store):
    for i in range(5):
        await store.create(f"/k/{i}", pod(str(i)))
    await store.compact(store.revision - 1)
    with pytest.raises(Gone):
        async for _ in store.watch("/k/", 1):
            pass


async def test_watch_from_the_compacted_revision_itself_still_works(store):
    for i in range(5):
        await store.create(f"/k/{i}", pod(str(i)))
    mark = store.revision - 2
    await store.compact(mark)
    assert store.compacted == mark
    got = await collect(store, "/k/", mark, 2)
    assert [e[2] for e in got] == [mark + 1, mark + 2]
    # Data survives compaction; only history goes.
    assert len((await store.list("/k/"))[0]) == 5


async def test_many_concurrent_writers(store):
    start = store.revision
    n = 300
    created = await asyncio.gather(*(store.create(f"/c/{i:04d}", pod(str(i))) for i in range(n)))
    revs = sorted(rv(o) for o in created)
    assert revs == list(range(start + 1, start + n + 1))
    items, rev = await store.list("/c/")
    assert len(items) == n and rev == start + n == store.revision


async def test_concurrent_updates_on_one_revision_only_one_wins(store):
    base = await store.create("/p/x", pod("x"))
    results = await asyncio.gather(
        *(store.update("/p/x", pod("x", spec={"w": i}), expected_revision=rv(base)) for i in range(20)),
        return_exceptions=True,
    )
    wins = [r for r in results if isinstance(r, dict)]
    assert len(wins) == 1
    assert all(isinstance(r, Conflict) for r in results if not isinstance(r, dict))
    assert await store.get("/p/x") == wins[0]


async def test_hundred_watchers_see_every_event_once_in_order(store):
    since = store.revision
    watchers = [asyncio.create_task(collect(store, "/w/", since, 400, limit=120)) for _ in range(100)]
    await asyncio.sleep(0.05)

    async def writer(i):
        for j in range(20):
            await store.create(f"/w/{i}/{j}", pod(f"{i}-{j}"))
        for j in range(0, 20, 2):
            await store.update(f"/w/{i}/{j}", pod(f"{i}-{j}", spec={}))
        for j in range(1, 20, 2):
            await store.delete(f"/w/{i}/{j}")

    await asyncio.gather(*(writer(i) for i in range(10)))
    assert store.revision == since + 400
    expected = list(range(since + 1, since + 401))
    for t in watchers:
        got = await t
        assert [e[2] for e in got] == expected
    # A watcher started afterwards from the same revision replays the very same sequence.
    assert await collect(store, "/w/", since, 400) == got


async def test_slow_watcher_is_ended_with_gone(make_store):
    store = await make_store(watch_queue=10)
    it, first = await started_watch(store, "/s/", store.revision)
    try:
        await store.create("/s/0", pod("0"))
        assert (await asyncio.wait_for(first, 5)).key == "/s/0"
        for i in range(1, 30):  # never consumed: the watcher's queue overflows
            await store.create(f"/s/{i}", pod(str(i)))
        with pytest.raises(Gone):
            await asyncio.wait_for(it.__anext__(), 5)
    finally:
        await it.aclose()
    # Fast watchers are unaffected, and a new watch works.
    assert len(await collect(store, "/s/", store.revision - 5, 5)) == 5


async def test_close_ends_watches(make_store):
    store = await make_store()
    it, first = await started_watch(store, "/x/", 0)
    await store.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(first, 5)
    with contextlib.suppress(Exception):
        await it.aclose()

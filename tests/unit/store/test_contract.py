"""The store contract, run against every backend that needs no external service."""

import asyncio

import pytest

from nodeagent.store.base import AlreadyExists, Conflict, Gone, NotFound, Store
from nodeagent.store.memory import MemoryStore

BACKENDS = {"memory": MemoryStore}


@pytest.fixture(params=sorted(BACKENDS))
async def store(request):
    s = BACKENDS[request.param]()
    await s.start()
    try:
        yield s
    finally:
        await s.close()


def pod(name, **extra):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, **extra}


async def test_is_a_store(store):
    assert isinstance(store, Store)


async def test_create_get_update_delete(store):
    a = await store.create("/pods/default/a", pod("a"))
    rv = int(a["metadata"]["resourceVersion"])
    assert rv == store.revision
    with pytest.raises(AlreadyExists):
        await store.create("/pods/default/a", pod("a"))
    got = await store.get("/pods/default/a")
    assert got == a
    b = await store.update("/pods/default/a", pod("a", spec={"x": 1}), expected_revision=rv)
    assert int(b["metadata"]["resourceVersion"]) > rv
    with pytest.raises(Conflict):
        await store.update("/pods/default/a", pod("a"), expected_revision=rv)
    gone = await store.delete("/pods/default/a")
    assert gone["spec"] == {"x": 1}
    with pytest.raises(NotFound):
        await store.get("/pods/default/a")
    with pytest.raises(NotFound):
        await store.delete("/pods/default/a")


async def test_list_by_prefix_with_revision(store):
    for n in ("b", "a", "c"):
        await store.create(f"/pods/default/{n}", pod(n))
    await store.create("/pods/other/z", pod("z"))
    items, rev = await store.list("/pods/default/")
    assert [i["metadata"]["name"] for i in items] == ["a", "b", "c"]
    assert rev == store.revision


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


async def test_watch_from_compacted_revision_is_gone(store):
    for i in range(5):
        await store.create(f"/k/{i}", pod(str(i)))
    await store.compact(store.revision - 1)
    with pytest.raises(Gone):
        async for _ in store.watch("/k/", 1):
            pass

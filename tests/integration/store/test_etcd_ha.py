"""etcd specifics: several stores (apiservers) on one etcd, old-revision watches, a restarted etcd, kill -9."""

import asyncio
import os
import uuid

import pytest

from nodeagent.store.base import Conflict, Gone
from nodeagent.store.etcd import EtcdStore
from tests.unit.store.test_contract import collect, pod, rv
from tests.unit.store.test_durability import check_acknowledged, run_and_kill


@pytest.fixture
async def stores(etcd_server):
    """Three stores on one etcd and one prefix, as three apiservers would be."""
    prefix = f"/ha-{uuid.uuid4().hex[:12]}"
    opened = [EtcdStore(etcd_server.endpoints, prefix=prefix) for _ in range(3)]
    for s in opened:
        await s.start()
    yield opened
    for s in opened:
        await s.close()


async def test_every_store_sees_every_write(stores):
    since = max(s.revision for s in stores)
    watches = [asyncio.create_task(collect(s, "/pods/", since, 90, limit=30)) for s in stores for _ in range(3)]
    await asyncio.sleep(0.2)

    async def writer(s, i):
        for j in range(30):
            await s.create(f"/pods/{i}-{j}", pod(f"{i}-{j}"))

    await asyncio.gather(*(writer(s, i) for i, s in enumerate(stores)))
    results = [await t for t in watches]
    assert all(r == results[0] for r in results)
    revs = [e[2] for e in results[0]]
    assert revs == sorted(revs) and len(set(revs)) == 90
    for s in stores:
        items, _ = await s.list("/pods/")
        assert len(items) == 90


async def test_conflicts_across_stores(stores):
    a, b, _ = stores
    base = await a.create("/x", pod("x"))
    await b.update("/x", pod("x", spec={"by": "b"}), expected_revision=rv(base))
    with pytest.raises(Conflict):
        await a.update("/x", pod("x", spec={"by": "a"}), expected_revision=rv(base))
    with pytest.raises(Conflict):
        await a.delete("/x", expected_revision=rv(base))


async def test_watch_from_before_the_feed_uses_its_own_stream(etcd_server):
    prefix = f"/old-{uuid.uuid4().hex[:12]}"
    writer = EtcdStore(etcd_server.endpoints, prefix=prefix)
    await writer.start()
    try:
        since = writer.revision
        for i in range(5):
            await writer.create(f"/k/{i}", pod(str(i)))
        late = EtcdStore(etcd_server.endpoints, prefix=prefix, ring_size=2)
        await late.start()  # its feed starts after those writes: they are not in its ring
        try:
            task = asyncio.create_task(collect(late, "/k/", since, 7))
            await asyncio.sleep(0.1)
            await writer.create("/k/5", pod("5"))
            await late.create("/k/6", pod("6"))
            got = await task
            assert [e[1] for e in got] == [f"/k/{i}" for i in range(7)]
        finally:
            await late.close()
    finally:
        await writer.close()


async def test_compaction_by_another_store_is_gone(stores):
    a, b, _ = stores
    since = a.revision
    for i in range(5):
        await a.create(f"/c/{i}", pod(str(i)))
    await a.compact(a.revision)
    late = EtcdStore(a.endpoints, prefix=a.prefix)
    await late.start()  # learns the compacted revision from the shared mark
    try:
        assert late.compacted == a.compacted
        with pytest.raises(Gone):
            await collect(late, "/c/", since, 1)
    finally:
        await late.close()


@pytest.mark.slow
async def test_feed_survives_an_etcd_restart(tmp_path):
    from nodeagent.testing.etcd import EtcdServer

    server = EtcdServer(name="restart", data_dir=str(tmp_path)).start()
    try:
        store = EtcdStore(server.endpoints, prefix="/r")
        await store.start()
        try:
            since = store.revision
            watch = asyncio.create_task(collect(store, "/k/", since, 4, limit=60))
            await store.create("/k/a", pod("a"))
            await store.create("/k/b", pod("b"))
            server.kill()  # SIGKILL: acknowledged writes are on etcd's disk (it fsyncs its WAL)
            server.start()
            await store.create("/k/c", pod("c"))
            await store.create("/k/d", pod("d"))
            got = await watch
            assert [e[1] for e in got] == ["/k/a", "/k/b", "/k/c", "/k/d"]
        finally:
            await store.close()
    finally:
        server.stop()


@pytest.mark.slow
async def test_etcd_kill_9_of_the_writer_loses_no_acknowledged_write(etcd_server, tmp_path):
    run = uuid.uuid4().hex[:8]
    lines = run_and_kill(f"etcd://{etcd_server.endpoint}", str(tmp_path), 1000, run)
    store = EtcdStore(etcd_server.endpoints)  # open_store's default prefix, as the writer used
    await store.start()
    try:
        await check_acknowledged(store, lines)
        items, _ = await store.list(f"/crash/{run}/")
        assert len(items) >= len({r[1] for r in lines})
        assert all(i["spec"]["key"].startswith(f"/crash/{run}/") for i in items)
    finally:
        await store.close()
    assert os.listdir(tmp_path) == []  # the etcd writer keeps nothing locally

"""etcd specifics: several stores (apiservers) on one etcd, old-revision watches,
a restarted etcd, kill -9."""

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
    watches = [asyncio.create_task(collect(s, "/pods/", since, 90, limit=120))
               for s in stores for _ in range(3)]
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
    store = EtcdStore(etcd_server.endpoints, prefix="")  # open_store's prefix, as the writer used
    await store.start()
    try:
        await check_acknowledged(store, lines)
        items, _ = await store.list(f"/crash/{run}/")
        assert len(items) >= len({r[1] for r in lines})
        assert all(i["spec"]["key"].startswith(f"/crash/{run}/") for i in items)
    finally:
        await store.close()
    assert os.listdir(tmp_path) == []  # the etcd writer keeps nothing locally


async def test_empty_prefix_as_open_store_uses_it(etcd_server):
    """open_store's etcd keeps the apiserver's /registry/... keys as they are (prefix ""), as kube does."""
    from nodeagent.store import open_store

    store = open_store(f"etcd://{etcd_server.endpoint}", "/nonexistent")
    await store.start()
    try:
        tag = uuid.uuid4().hex[:8]
        top = f"/u-{tag}/"
        a = await store.create(top + "a", pod(f"a-{tag}"))
        await store.compact(rv(a))  # writes the compaction mark, a key outside every object prefix
        await store.create(top + "b", pod(f"b-{tag}"))
        got = await collect(store, "", rv(a), 1)  # the mark's own event is not an object event
        assert [e[1] for e in got] == [top + "b"]
        items, _ = await store.list("")  # every key in etcd; the marks are skipped, not decoded
        assert {f"a-{tag}", f"b-{tag}"} <= {i["metadata"]["name"] for i in items}
    finally:
        await store.close()


async def test_revision_is_always_reached_by_the_watch(stores):
    """`revision` never counts etcd revisions that produce no event here (the compaction mark)."""
    a, b, _ = stores
    first = await a.create("/r/1", pod("1"))
    await a.compact(rv(first))  # etcd's revision moves on: the mark is written
    assert a.revision == rv(first)
    since = a.revision
    second = await b.create("/r/2", pod("2"))  # written through another server
    got = await collect(a, "/r/", since, 1)
    assert got == [("ADDED", "/r/2", rv(second))]
    assert a.revision == rv(second)  # learnt from its feed, as the apiserver's cache would


@pytest.mark.slow
async def test_store_fails_over_between_etcd_members():
    """A three-member etcd loses the member the store talks to: writes and the watch feed move on."""
    from nodeagent.store.base import AlreadyExists
    from nodeagent.store.etcd import EtcdError
    from nodeagent.testing.etcd import EtcdCluster, available

    why = available()
    if why:
        pytest.skip(why)

    async def create_retrying(store, key):
        for _ in range(100):  # during a leader election etcd answers "unavailable" for a moment
            try:
                return await store.create(key, pod(key))
            except AlreadyExists:  # an earlier attempt was applied after all
                return await store.get(key)
            except EtcdError:
                await asyncio.sleep(0.2)
        raise AssertionError(f"{key}: etcd never answered")

    cluster = await asyncio.to_thread(lambda: EtcdCluster(3).start())
    try:
        store = EtcdStore(cluster.endpoints, prefix="/failover")
        await store.start()
        try:
            since = store.revision
            watch = asyncio.create_task(collect(store, "/k/", since, 6, limit=120))
            for i in range(3):
                await store.create(f"/k/{i}", pod(str(i)))
            cluster.members[0].kill()  # the member the store has been using
            for i in range(3, 6):
                await create_retrying(store, f"/k/{i}")
            got = await watch
            assert [e[1] for e in got] == [f"/k/{i}" for i in range(6)]
            items, _ = await store.list("/k/")
            assert len(items) == 6
        finally:
            await store.close()
    finally:
        await asyncio.to_thread(cluster.stop)
    assert not await asyncio.to_thread(os.path.exists, cluster.dir)


async def test_feed_cut_off_past_a_compaction_ends_its_watchers_with_gone(etcd_server):
    """The feed loses etcd while another server writes and compacts: its watchers must relist (Gone),
    and the store serves new watches afterwards."""
    from tests.integration.store.proxy import Proxy
    from tests.unit.store.test_contract import started_watch

    host, port = etcd_server.endpoint.split(":")
    proxy = Proxy(host, int(port))
    await proxy.resume()
    prefix = f"/cut-{uuid.uuid4().hex[:12]}"
    cut = EtcdStore([proxy.endpoint], prefix=prefix)
    other = EtcdStore(etcd_server.endpoints, prefix=prefix)
    await cut.start()
    await other.start()
    try:
        it, first = await started_watch(cut, "/k/", cut.revision)
        await other.create("/k/0", pod("0"))
        assert (await asyncio.wait_for(first, 30)).key == "/k/0"
        await proxy.pause()
        for i in range(1, 4):
            await other.create(f"/k/{i}", pod(str(i)))
        await other.compact(other.revision)
        await proxy.resume()
        with pytest.raises(Gone):
            await asyncio.wait_for(it.__anext__(), 30)
        await it.aclose()
        since = other.revision
        task = asyncio.create_task(collect(cut, "/k/", since, 1))
        await asyncio.sleep(0.2)
        late = await other.create("/k/4", pod("4"))
        assert await task == [("ADDED", "/k/4", rv(late))]
    finally:
        await cut.close()
        await other.close()
        await proxy.pause()


async def test_start_without_etcd_fails_cleanly():
    from nodeagent.store.etcd import EtcdError
    from nodeagent.testing.etcd import free_port

    store = EtcdStore([f"127.0.0.1:{free_port()}"], timeout=2)  # nothing listens there
    with pytest.raises(EtcdError, match="no etcd endpoint reachable"):
        await store.start()
    await store.close()

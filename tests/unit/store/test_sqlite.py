"""SQLite specifics: reopening, one owner per file, failed commits, backlog replay from the log table."""

import asyncio
import os

import pytest

from nodeagent.store.base import Gone
from nodeagent.store.sqlite import SQLiteStore


async def test_sqlite_store_reopens_with_state_and_history(tmp_path):
    path = str(tmp_path / "s.db")
    s = SQLiteStore(path)
    await s.start()
    a = await s.create("/p/a", {"metadata": {"name": "a"}})
    await s.update("/p/a", {"metadata": {"name": "a"}, "spec": 1})
    await s.create("/p/b", {"metadata": {"name": "b"}})
    await s.delete("/p/b")
    await s.compact(int(a["metadata"]["resourceVersion"]))
    rev = s.revision
    await s.close()
    s = SQLiteStore(path, ring_size=1)
    await s.start()
    try:
        assert (s.revision, s.compacted) == (rev, int(a["metadata"]["resourceVersion"]))
        assert [o["spec"] for o in (await s.list("/p/"))[0]] == [1]
        # The ring is empty after a restart: the backlog comes from the log table, prev included.
        events = []
        async for ev in s.watch("/p/", s.compacted):
            events.append(ev)
            if len(events) == 3:
                break
        assert [e.type for e in events] == ["MODIFIED", "ADDED", "DELETED"]
        # its previous entry was compacted away; the compaction left its value on the entry after it
        assert events[0].prev == a
        assert events[2].prev == events[1].object
    finally:
        await s.close()


async def test_sqlite_file_has_one_owner_and_is_private(tmp_path):
    from nodeagent.store.base import StoreError

    path = str(tmp_path / "d" / "s.db")
    a = SQLiteStore(path)
    await a.start()
    try:
        assert os.stat(path).st_mode & 0o777 == 0o600
        assert os.stat(tmp_path / "d").st_mode & 0o777 == 0o700
        b = SQLiteStore(path)
        with pytest.raises(StoreError, match="in use"):
            await b.start()
    finally:
        await a.close()
    b = SQLiteStore(path)  # free again once the owner closed it
    await b.start()
    await b.close()


async def test_sqlite_failed_commit_fails_its_batch_and_the_store_carries_on(tmp_path):
    import sqlite3

    from nodeagent.store.base import NotFound, StoreError
    from nodeagent.store.sqlite import verify

    path = str(tmp_path / "s.db")
    s = SQLiteStore(path)
    await s.start()
    try:
        a = await s.create("/p/a", {"metadata": {"name": "a"}})
        with sqlite3.connect(path) as c:  # an I/O-level failure for one key, inside the transaction
            c.execute(
                "CREATE TRIGGER boom BEFORE INSERT ON log WHEN NEW.key = '/p/boom' "
                "BEGIN SELECT RAISE(ABORT, 'boom'); END"
            )
        with pytest.raises(StoreError, match="boom"):
            await s.create("/p/boom", {"metadata": {"name": "boom"}})
        with pytest.raises(NotFound):  # nothing of the failed batch is visible
            await s.get("/p/boom")
        b = await s.create("/p/b", {"metadata": {"name": "b"}})
        rev_a, rev_b = int(a["metadata"]["resourceVersion"]), int(b["metadata"]["resourceVersion"])
        assert rev_b == rev_a + 1 == s.revision
    finally:
        await s.close()
    assert verify(path) == []


async def test_sqlite_watch_backlog_from_the_log_table_hands_over_to_live_events(tmp_path):
    """Watches that start behind the ring (ring_size=1) replay from the table while writes go on."""
    s = SQLiteStore(str(tmp_path / "s.db"), ring_size=1)
    await s.start()
    try:
        base = s.revision
        for i in range(50):
            await s.create(f"/h/{i:03d}", {"metadata": {"name": str(i)}})
        total = 150

        async def watcher(since):
            revs = []
            async for ev in s.watch("/h/", since):
                revs.append(ev.revision)
                if ev.revision == base + total:
                    return since, revs

        async def writer():
            for i in range(50, total):
                await s.create(f"/h/{i:03d}", {"metadata": {"name": str(i)}})
                if i % 10 == 0:
                    watchers.append(asyncio.create_task(watcher(base + i - 45)))  # always behind the ring

        watchers = [asyncio.create_task(watcher(base))]
        await writer()
        for since, revs in await asyncio.wait_for(asyncio.gather(*watchers), 60):
            assert revs == list(range(since + 1, base + total + 1))
    finally:
        await s.close()


async def test_list_at_reads_the_log_beyond_the_ring_and_across_a_compaction(tmp_path):
    """Past the ring the state at a revision comes from the log table. A value superseded after that
    revision but written before the compaction is carried by the entry that superseded it (at its write,
    or by the compaction), so every revision since the compaction is served, as by etcd; older: Gone."""
    s = SQLiteStore(str(tmp_path / "s.db"), ring_size=2)
    await s.start()
    try:
        await s.create("/p/old", {"metadata": {"name": "old"}, "v": 0})
        await s.create("/p/x", {"metadata": {"name": "x"}, "v": 0})
        await s.create("/p/a", {"metadata": {"name": "a"}, "v": 1})
        at = s.revision
        await s.update("/p/x", {"metadata": {"name": "x"}, "v": 1})
        for v in range(2, 6):
            await s.update("/p/a", {"metadata": {"name": "a"}, "v": v})
        await s.create("/p/b", {"metadata": {"name": "b"}})
        want = [("a", 1), ("old", 0), ("x", 0)]
        assert [(o["metadata"]["name"], o["v"]) for o in await s.list_at("/p/", at)] == want
        await s.compact(at)  # x's and a's values at `at` were written at or before it: kept by their next
        assert [(o["metadata"]["name"], o["v"]) for o in await s.list_at("/p/", at)] == want
        await s.update("/p/old", {"metadata": {"name": "old"}, "v": 9})  # written before it: carried along
        assert [(o["metadata"]["name"], o["v"]) for o in await s.list_at("/p/", at)] == want
        now = [(o["metadata"]["name"], o.get("v")) for o in await s.list_at("/p/", s.revision)]
        assert now == [("a", 5), ("b", None), ("old", 9), ("x", 1)]
        with pytest.raises(Gone):
            await s.list_at("/p/", at - 1)
    finally:
        await s.close()

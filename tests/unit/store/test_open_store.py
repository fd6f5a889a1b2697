"""open_store: the --datastore values the server accepts."""

import os

import pytest

from nodeagent.store import open_store
from nodeagent.store.etcd import EtcdStore
from nodeagent.store.memory import MemoryStore
from nodeagent.store.sqlite import SQLiteStore


def test_default_is_sqlite_under_the_data_dir(tmp_path):
    s = open_store("sqlite", str(tmp_path))
    assert isinstance(s, SQLiteStore) and s.path == os.path.join(tmp_path, "store.db")
    assert isinstance(open_store("", str(tmp_path)), SQLiteStore)
    assert open_store("sqlite://x/y.db", str(tmp_path)).path == os.path.join(tmp_path, "x/y.db")
    assert open_store("sqlite:///abs.db", str(tmp_path)).path == "/abs.db"


def test_memory_and_etcd(tmp_path):
    assert isinstance(open_store("memory", str(tmp_path)), MemoryStore)
    e = open_store("etcd://10.0.0.1:2379,10.0.0.2:2379", str(tmp_path))
    assert isinstance(e, EtcdStore)
    assert e.endpoints == ["http://10.0.0.1:2379", "http://10.0.0.2:2379"] and e.prefix == "/registry"


@pytest.mark.parametrize("bad", ["etcd://", "postgres://x", "mysql"])
def test_unknown_datastores_are_refused(tmp_path, bad):
    with pytest.raises(ValueError):
        open_store(bad, str(tmp_path))


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
        assert events[0].prev is None  # its previous entry was compacted away
        assert events[2].prev == events[1].object
    finally:
        await s.close()

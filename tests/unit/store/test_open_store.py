"""open_store: the --datastore values the server accepts."""

import os

import pytest

from nodeagent.store import open_store
from nodeagent.store.etcd import EtcdStore
from nodeagent.store.memory import MemoryStore
from nodeagent.store.sqlite import SQLiteStore


def _sqlite(datastore: str, data_dir: str) -> SQLiteStore:
    s = open_store(datastore, data_dir)
    assert isinstance(s, SQLiteStore), s
    return s


def test_default_is_sqlite_under_the_data_dir(tmp_path):
    s = open_store("sqlite", str(tmp_path))
    assert isinstance(s, SQLiteStore) and s.path == os.path.join(tmp_path, "store.db")
    assert isinstance(open_store("", str(tmp_path)), SQLiteStore)
    assert _sqlite("sqlite://x/y.db", str(tmp_path)).path == os.path.join(tmp_path, "x/y.db")
    assert _sqlite("sqlite:///abs.db", str(tmp_path)).path == "/abs.db"
    assert _sqlite("sqlite", str(tmp_path)).synchronous == "FULL"
    normal = _sqlite("sqlite?synchronous=normal", str(tmp_path))
    assert (normal.path, normal.synchronous) == (os.path.join(tmp_path, "store.db"), "NORMAL")
    assert _sqlite("sqlite://x.db?synchronous=NORMAL", str(tmp_path)).synchronous == "NORMAL"


def test_memory_and_etcd(tmp_path):
    assert isinstance(open_store("memory", str(tmp_path)), MemoryStore)
    e = open_store("etcd://10.0.0.1:2379,10.0.0.2:2379", str(tmp_path))
    assert isinstance(e, EtcdStore)
    assert e.endpoints == ["http://10.0.0.1:2379", "http://10.0.0.2:2379"] and e.prefix == ""


@pytest.mark.parametrize(
    "bad", ["etcd://", "postgres://x", "mysql", "sqlite?synchronous=OFF", "sqlite?cache=1", "sqlite://"]
)
def test_unknown_datastores_are_refused(tmp_path, bad):
    with pytest.raises(ValueError):
        open_store(bad, str(tmp_path))

"""The apiserver's storage: one contract (base.Store), three backends (memory, SQLite, etcd)."""

from __future__ import annotations

import os

from nodeagent.store.base import Store

SQLITE_FILE = "store.db"


def open_store(datastore: str, data_dir: str) -> Store:
    """The backend named by `--datastore`: `sqlite` (default; `<data_dir>/store.db`), `sqlite://PATH`
    (relative to data_dir unless absolute), `memory`, or `etcd://HOST:PORT[,HOST:PORT...]` (plain
    HTTP to etcd's gRPC gateway; keys under /registry).

    The store is returned unstarted: the caller awaits `start()` and, at the end, `close()`.
    """
    datastore = (datastore or "sqlite").strip()
    if datastore == "sqlite":
        from nodeagent.store.sqlite import SQLiteStore

        return SQLiteStore(os.path.join(data_dir, SQLITE_FILE))
    if datastore.startswith("sqlite://"):
        from nodeagent.store.sqlite import SQLiteStore

        path = datastore[len("sqlite://") :]
        return SQLiteStore(path if os.path.isabs(path) else os.path.join(data_dir, path))
    if datastore == "memory":
        from nodeagent.store.memory import MemoryStore

        return MemoryStore()
    if datastore.startswith("etcd://"):
        from nodeagent.store.etcd import EtcdStore

        endpoints = [e.strip() for e in datastore[len("etcd://") :].split(",") if e.strip()]
        if not endpoints:
            raise ValueError(f"no etcd endpoint in {datastore!r}")
        return EtcdStore(endpoints)
    raise ValueError(f"unknown datastore {datastore!r}: use sqlite, memory or etcd://HOST:PORT[,HOST:PORT]")


__all__ = ["SQLITE_FILE", "Store", "open_store"]

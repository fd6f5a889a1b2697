"""The apiserver's storage: one contract (base.Store), three backends (memory, SQLite, etcd)."""

from __future__ import annotations

import os

from nodeagent.store.base import Store

SQLITE_FILE = "store.db"


def open_store(datastore: str, data_dir: str) -> Store:
    """The backend named by `--datastore`: `sqlite` (default; `<data_dir>/store.db`), `sqlite://PATH`
    (relative to data_dir unless absolute), either with `?synchronous=NORMAL` to trade durability
    against power loss (not against kill -9) for commit latency, `memory`, or
    `etcd://HOST:PORT[,HOST:PORT...]` (plain HTTP to etcd's gRPC gateway; the apiserver's keys,
    `/registry/...`, are used as they are, so the layout in etcd is the one kube-apiserver uses).

    The store is returned unstarted: the caller awaits `start()` and, at the end, `close()`.
    """
    datastore = (datastore or "sqlite").strip()
    if datastore == "sqlite" or datastore.startswith(("sqlite?", "sqlite://")):
        from nodeagent.store.sqlite import SQLiteStore

        base, _, query = datastore.partition("?")
        options = dict(kv.partition("=")[::2] for kv in query.split("&") if kv)
        unknown = set(options) - {"synchronous"}
        if unknown:
            raise ValueError(f"unknown sqlite option(s) {sorted(unknown)} in {datastore!r}")
        path = base[len("sqlite://") :] if base.startswith("sqlite://") else SQLITE_FILE
        if not path:
            raise ValueError(f"no file in {datastore!r}")
        return SQLiteStore(
            path if os.path.isabs(path) else os.path.join(data_dir, path),
            synchronous=options.get("synchronous", "FULL"),
        )
    if datastore == "memory":
        from nodeagent.store.memory import MemoryStore

        return MemoryStore()
    if datastore.startswith("etcd://"):
        from nodeagent.store.etcd import EtcdStore

        endpoints = [e.strip() for e in datastore[len("etcd://") :].split(",") if e.strip()]
        if not endpoints:
            raise ValueError(f"no etcd endpoint in {datastore!r}")
        return EtcdStore(endpoints, prefix="")  # the apiserver's keys already start with /registry/
    raise ValueError(f"unknown datastore {datastore!r}: use sqlite, memory or etcd://HOST:PORT[,HOST:PORT]")


__all__ = ["SQLITE_FILE", "Store", "open_store"]

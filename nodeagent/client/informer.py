"""List-then-watch caches (informers): a local copy of one resource kept current, with event handlers.

Lists, then watches from the list's resourceVersion; reconnects from the last seen version (bookmarks
keep it fresh); a 410 Gone means the history was compacted: relist and emit the difference, so handlers
see every object converge without duplicates. `resync` periodically re-delivers every object as an update.
Handlers should only record (e.g. enqueue a key); they may be plain functions or coroutines.
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import logging
import random
from collections.abc import Callable, Iterable
from typing import Any

from nodeagent.client.rest import Client, ClientError, resolve

log = logging.getLogger("nodeagent.client.informer")

Handler = Callable[..., Any]


def key_of(obj: dict[str, Any]) -> str:
    m = obj.get("metadata") or {}
    return f"{m['namespace']}/{m['name']}" if m.get("namespace") else m["name"]


class Informer:
    def __init__(self, client: Client, resource: str, namespace: str | None = None,
                 label_selector: str | None = None, field_selector: str | None = None, resync: float = 0.0,
                 watch_timeout: int = 300) -> None:
        self.client = client
        self.resource = resolve(resource)
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.resync = resync
        self.watch_timeout = watch_timeout
        self.cache: dict[str, dict[str, Any]] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.relists = 0
        self._handlers: list[tuple[Handler | None, Handler | None, Handler | None]] = []
        self._indexers: dict[str, Callable[[dict[str, Any]], Iterable[str]]] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}

    # ------------------------------------------------------------------ read side
    def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.cache.get(f"{namespace}/{name}" if namespace else name)

    def list(self) -> list[dict[str, Any]]:
        return list(self.cache.values())

    def add_index(self, name: str, fn: Callable[[dict[str, Any]], Iterable[str]]) -> None:
        """Keep objects findable by `fn(obj)` values (e.g. pods by spec.nodeName); see `by_index`."""
        self._indexers[name] = fn
        self._indices[name] = {}
        for k, o in self.cache.items():
            self._index_add(name, k, o)

    def by_index(self, name: str, value: str) -> builtins.list[dict[str, Any]]:  # (`list` is a method here)
        return [self.cache[k] for k in sorted(self._indices[name].get(value, ())) if k in self.cache]

    def _index_add(self, name: str, key: str, obj: dict[str, Any]) -> None:
        for v in self._indexers[name](obj) or ():
            self._indices[name].setdefault(v, set()).add(key)

    def _index_remove(self, key: str, obj: dict[str, Any] | None) -> None:
        if obj is None:
            return
        for name, fn in self._indexers.items():
            for v in fn(obj) or ():
                keys = self._indices[name].get(v)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._indices[name][v]

    def _store(self, key: str, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        """Put (or with None remove) one object, keeping the indices in step; returns the old one."""
        old = self.cache.pop(key, None)
        self._index_remove(key, old)
        if obj is not None:
            self.cache[key] = obj
            for name in self._indexers:
                self._index_add(name, key, obj)
        return old

    def add_handler(self, on_add: Handler | None = None, on_update: Handler | None = None,
                    on_delete: Handler | None = None) -> None:
        """on_add(obj), on_update(old, new), on_delete(obj)."""
        self._handlers.append((on_add, on_update, on_delete))

    async def wait_synced(self) -> None:
        await self.synced.wait()

    # ------------------------------------------------------------------ loop
    async def run(self, ready: asyncio.Event | None = None) -> None:
        """Run until cancelled; `ready` (and `synced`) is set after the first full list is delivered."""
        backoff = 0.2
        need_list = True
        tasks = []
        if self.resync > 0:
            tasks.append(asyncio.get_running_loop().create_task(self._resync_loop()))
        try:
            while True:
                try:
                    if need_list:
                        await self._relist()
                        need_list = False
                        self.synced.set()
                        if ready is not None:
                            ready.set()
                    await self._watch()
                    backoff = 0.2
                except ClientError as e:
                    if e.gone:
                        log.info("%s: watch history compacted (%s); relisting", self.resource.name, e.message)
                        need_list = True
                        continue
                    log.debug("%s: %s; retrying in %.1fs", self.resource.name, e, backoff)
                    await asyncio.sleep(backoff * (1 + random.random() / 4))
                    backoff = min(backoff * 2, 10.0)
        finally:
            for t in tasks:
                t.cancel()

    async def _relist(self) -> None:
        out = await self.client.list(self.resource, self.namespace, self.label_selector, self.field_selector,
                                     limit=500)
        fresh = {key_of(o): o for o in out["items"]}
        old = self.cache
        self.cache = fresh
        self._indices = {name: {} for name in self._indexers}
        for k, o in fresh.items():
            for name in self._indexers:
                self._index_add(name, k, o)
        self.resource_version = out["metadata"]["resourceVersion"]
        if self.synced.is_set():
            self.relists += 1
        for k, o in fresh.items():
            if k not in old:
                await self._emit(0, o)
            elif old[k]["metadata"].get("resourceVersion") != o["metadata"].get("resourceVersion"):
                await self._emit(1, old[k], o)
        for k, o in old.items():
            if k not in fresh:
                await self._emit(2, o)

    async def _watch(self) -> None:
        async for ev in self.client.watch(self.resource, self.namespace, self.resource_version,
                                          self.label_selector, self.field_selector,
                                          timeout_seconds=self.watch_timeout):
            typ, obj = ev["type"], ev["object"]
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if typ == "BOOKMARK":
                if rv:
                    self.resource_version = rv
                continue
            k = key_of(obj)
            if typ == "ADDED" or typ == "MODIFIED":
                old = self._store(k, obj)
                if old is None:
                    await self._emit(0, obj)
                else:
                    await self._emit(1, old, obj)
            elif typ == "DELETED":
                old = self._store(k, None)
                await self._emit(2, old or obj)
            if rv:
                self.resource_version = rv

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.resync)
            if self.synced.is_set():
                for o in list(self.cache.values()):
                    await self._emit(1, o, o)

    async def _emit(self, which: int, *args: Any) -> None:
        for hs in self._handlers:
            fn = hs[which]
            if fn is None:
                continue
            try:
                r = fn(*args)
                if inspect.isawaitable(r):
                    await r
            except Exception:
                log.exception("%s informer handler", self.resource.name)


class SharedInformers:
    """One informer per resource, shared by every controller that reads it."""

    def __init__(self, client: Client, resync: float = 0.0) -> None:
        self.client = client
        self.resync = resync
        self._informers: dict[str, Informer] = {}

    def get(self, resource: str) -> Informer:
        if resource not in self._informers:
            self._informers[resource] = Informer(self.client, resource, resync=self.resync)
        return self._informers[resource]

    async def run(self, tg: asyncio.TaskGroup) -> None:
        """Start every informer in `tg` and wait until all have listed once."""
        for name, inf in self._informers.items():
            tg.create_task(inf.run(), name=f"informer-{name}")
        await asyncio.gather(*(inf.wait_synced() for inf in self._informers.values()))

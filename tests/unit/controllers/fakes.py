"""In-memory stand-ins for the client, informers and recorder, to drive controller loops in unit tests."""

from __future__ import annotations

import copy
import itertools

from nodeagent.client.informer import Handler, Informer, SharedInformers, key_of
from nodeagent.client.rest import ClientError

_rv = itertools.count(1)


class FakeInformer(Informer):
    """An informer's cache and handlers, filled by hand (no client, no list or watch: Informer's
    constructor is not run)."""

    def __init__(self) -> None:
        self.cache: dict[str, dict] = {}
        self.handlers: list[tuple[Handler | None, Handler | None, Handler | None]] = []

    def add_handler(self, a=None, u=None, d=None):
        self.handlers.append((a, u, d))

    def get(self, name, namespace=None):
        return self.cache.get(f"{namespace}/{name}" if namespace else name)

    def list(self):
        return list(self.cache.values())

    def put(self, obj):
        k = key_of(obj)
        old = self.cache.get(k)
        self.cache[k] = obj
        for a, u, _ in self.handlers:
            if old is None and a:
                a(obj)
            elif old is not None and u:
                u(old, obj)

    def remove(self, obj):
        old = self.cache.pop(key_of(obj), None)
        for _, _, d in self.handlers:
            if d and old:
                d(old)


class FakeInformers(SharedInformers):
    """One FakeInformer per resource (SharedInformers' constructor is not run: no client)."""

    def __init__(self) -> None:
        self.by: dict[str, FakeInformer] = {}

    def get(self, resource: str) -> FakeInformer:
        return self.by.setdefault(resource, FakeInformer())


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def record(self, obj, type_, reason, message):
        self.events.append((obj["metadata"]["name"], reason, message))


class FakeClient:
    """Writes go to the matching FakeInformer at once (a cache with no lag) and are logged in `calls`."""

    def __init__(self, informers: FakeInformers) -> None:
        self.inf = informers
        self.calls: list[tuple] = []
        self.uids = itertools.count(1)

    def _store(self, resource):
        return self.inf.get(resource)

    async def get(self, resource, name, namespace=None):
        obj = self._store(resource).get(name, namespace)
        if obj is None:
            raise ClientError(404, "NotFound", f"{resource} {name} not found")
        return copy.deepcopy(obj)

    async def create(self, resource, obj, namespace=None):
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if namespace:
            meta["namespace"] = namespace
        if not meta.get("name"):
            meta["name"] = meta["generateName"] + f"{next(self.uids):05d}"
        if self._store(resource).get(meta["name"], meta.get("namespace")) is not None:
            raise ClientError(409, "AlreadyExists", f"{meta['name']} exists")
        meta.setdefault("uid", f"uid-{next(self.uids)}")
        meta["resourceVersion"] = str(next(_rv))
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        self.calls.append(("create", resource, meta["name"]))
        self._store(resource).put(obj)
        return copy.deepcopy(obj)

    async def update_status(self, resource, obj):
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(next(_rv))
        self.calls.append(("status", resource, obj["metadata"]["name"]))
        self._store(resource).put(obj)
        return obj

    async def update(self, resource, obj, namespace=None, subresource=""):
        return await self.update_status(resource, obj)

    async def patch(self, resource, name, patch, namespace=None, **kw):
        cur = await self.get(resource, name, namespace)

        def merge(a, b):
            for k, v in b.items():
                if v is None:
                    a.pop(k, None)
                elif isinstance(v, dict) and isinstance(a.get(k), dict):
                    merge(a[k], v)
                else:
                    a[k] = copy.deepcopy(v)
        merge(cur, patch)
        cur["metadata"]["resourceVersion"] = str(next(_rv))
        self.calls.append(("patch", resource, name, patch))
        self._store(resource).put(cur)
        return cur

    async def delete(self, resource, name, namespace=None, grace_period=None, propagation=None, **kw):
        obj = self._store(resource).get(name, namespace)
        if obj is None:
            raise ClientError(404, "NotFound", f"{name} not found")
        self.calls.append(("delete", resource, name))
        self._store(resource).remove(obj)
        return {}


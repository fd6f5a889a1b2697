"""List-then-watch caches (informers): a local copy of one resource kept current, with event handlers.

Lists, then watches from the list's resourceVersion; reconnects from the last seen version (bookmarks
keep it fresh); a 410 Gone means the history was compacted: relist and emit the difference, so handlers
see every object converge without duplicates. `resync` periodically re-delivers every object as an update.
Handlers should only record (e.g. enqueue a key); they may be plain functions or coroutines.

`shared()` gives every component of one process the same informer for the same objects and credentials
(client-go's shared informers, across components as well: in `up` and `agent`, DNS, netproxy, netpol,
ingress, the LB speaker and the kubelet read one cache of services, endpointslices, nodes, pods and
namespaces; the kubelet sees its node's pods through a `Subset` of the cache of every pod).
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import logging
import random
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from nodeagent.api.resources import Resource
from nodeagent.client.rest import Client, ClientError, resolve

log = logging.getLogger("nodeagent.client.informer")

Handler = Callable[..., Any]


def key_of(obj: dict[str, Any]) -> str:
    m = obj.get("metadata") or {}
    return f"{m['namespace']}/{m['name']}" if m.get("namespace") else m["name"]


class Informer:
    def __init__(self, client: Client, resource: str | Resource, namespace: str | None = None,
                 label_selector: str | None = None, field_selector: str | None = None, resync: float = 0.0,
                 watch_timeout: int = 300, metadata_only: bool = False) -> None:
        self.client = client
        self.metadata_only = metadata_only  # a metadata informer: PartialObjectMetadata, ObjectMeta alone
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
        self._runners = 0  # run() calls in progress; one drives the list/watch loop, the rest wait
        self._driving = False
        self._handoff = asyncio.Event()  # set when the driver stops: a waiting runner takes over
        self._on_idle: Callable[[], None] | None = None  # shared(): forget this informer when no one runs it
        self.readers: set[Any] = set()  # shared(): identities the apiserver allows to list and watch these

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
                    on_delete: Handler | None = None) -> Callable[[], None]:
        """on_add(obj), on_update(old, new), on_delete(obj); returns the function that removes them.

        Added to an informer that has already listed (a shared one another component runs), the handler is
        first given every cached object as an add, as client-go's AddEventHandler does; such a replay
        calls on_add synchronously, so handlers of shared informers must be plain functions."""
        entry = (on_add, on_update, on_delete)
        self._handlers.append(entry)
        if on_add is not None and self.synced.is_set():
            for o in builtins.list(self.cache.values()):
                r = on_add(o)
                if inspect.isawaitable(r):
                    if inspect.iscoroutine(r):
                        r.close()
                    raise TypeError(f"{self.resource.name} informer: a handler added after the first list "
                                    "must be a plain function (its replay is synchronous)")

        def remove() -> None:
            if entry in self._handlers:
                self._handlers.remove(entry)
        return remove

    async def wait_synced(self) -> None:
        await self.synced.wait()

    # ------------------------------------------------------------------ loop
    async def run(self, ready: asyncio.Event | None = None, client: Client | None = None) -> None:
        """Run until cancelled; `ready` (and `synced`) is set after the first full list is delivered.

        Several components may run one (shared) informer at once: the first drives the list/watch loop
        with its `client` (default: the informer's), the others wait; when the driver is cancelled, a
        waiting runner relists with its own client and carries on (a full relist: handlers converge)."""
        self._runners += 1
        try:
            while True:
                if not self._driving:
                    self._driving = True
                    if client is not None:
                        self.client = client
                    try:
                        await self._loop(ready)
                    finally:
                        self._driving = False
                        self._handoff.set()
                        self._handoff = asyncio.Event()
                await self._follow(ready)
        finally:
            self._runners -= 1
            if self._runners == 0 and self._on_idle is not None:
                self._on_idle()

    async def _follow(self, ready: asyncio.Event | None) -> None:
        """A runner that does not drive: pass `ready` on once listed, and wait until the driver stops."""
        handoff = self._handoff
        if ready is not None and not ready.is_set():
            async with asyncio.TaskGroup() as tg:
                stopped = tg.create_task(handoff.wait())
                listed = tg.create_task(self.synced.wait())
                await asyncio.wait([stopped, listed], return_when=asyncio.FIRST_COMPLETED)
                stopped.cancel()
                listed.cancel()
            if self.synced.is_set():
                ready.set()
        await handoff.wait()

    async def _loop(self, ready: asyncio.Event | None) -> None:
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
                                     limit=500, metadata_only=self.metadata_only)
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
                                          timeout_seconds=self.watch_timeout,
                                          metadata_only=self.metadata_only):
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


_SHARED: weakref.WeakValueDictionary[tuple[Any, ...], Informer] = weakref.WeakValueDictionary()
ACCESS_RETRY_MAX = 10.0  # seconds between access checks of a reader the apiserver refused


def shared(client: Client, resource: str | Resource, namespace: str | None = None,
           label_selector: str | None = None, field_selector: str | None = None,
           metadata_only: bool = False) -> SharedInformer:
    """This process's informer for these objects, through a handle for this user (`client`): one cache and
    one watch however many components ask, whatever their credentials, as kube-controller-manager's
    SharedInformerFactory shares one per resource among its controllers. A user whose identity differs
    from the informer's first one reads it only once the apiserver says it may list and watch those
    objects itself (a SelfSubjectAccessReview); until then its handle shows nothing, as a refused list
    would. With a field selector (the Node authorizer's per-name reads) the informer is per identity.
    Each user runs its handle (`run(client=its client)`), adds plain-function handlers and removes them
    when it stops (`add_handler` returns the remover). Once no one runs it, it is forgotten: the next user
    gets a fresh one. With `metadata_only`, the process's metadata informer of them (client-go's
    metadatainformer: PartialObjectMetadata, for a user that reads nothing but ObjectMeta)."""
    res = resolve(resource)
    key = _key(client, res, namespace, label_selector, field_selector, metadata_only)
    inf = _SHARED.get(key)
    if inf is None:
        inf = Informer(client, resource, namespace, label_selector, field_selector,
                       metadata_only=metadata_only)

        def forget(key: tuple[Any, ...] = key, inf: Informer = inf) -> None:
            if _SHARED.get(key) is inf:
                del _SHARED[key]
        inf._on_idle = forget
        _SHARED[key] = inf
        inf.readers.add(client.identity)  # the first user's own list is its check
    return SharedInformer(inf, client)


def _key(client: Client, res: Resource, namespace: str | None, label_selector: str | None,
         field_selector: str | None, metadata_only: bool) -> tuple[Any, ...]:
    who = client.identity if field_selector else None
    return (who, res.gv_path, res.name, namespace, label_selector, field_selector, metadata_only)


def shared_metadata(client: Client, resource: str | Resource) -> SharedInformer:
    """What a reader of ObjectMeta alone (the garbage collector) watches: the process's informer of whole
    objects when another component runs one (its cache holds the metadata already: no second list and
    watch), else the process's metadata informer. `full_informer_running` tells when to switch."""
    if full_informer_running(client, resource):
        return shared(client, resource)
    return shared(client, resource, metadata_only=True)


def full_informer_running(client: Client, resource: str | Resource) -> bool:
    """Whether this process runs an informer of every one of these objects, whole (not metadata-only)."""
    inf = _SHARED.get(_key(client, resolve(resource), None, None, None, False))
    return inf is not None and inf._runners > 0


async def _may_read(client: Client, inf: Informer) -> str | None:
    """None when the apiserver allows `client` to list and watch the informer's objects; else why not."""
    for verb in ("list", "watch"):
        attrs = {"verb": verb, "group": inf.resource.group, "resource": inf.resource.name,
                 "namespace": inf.namespace or ""}
        out = await client.create("selfsubjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs}})
        st = out.get("status") or {}
        if not st.get("allowed") or st.get("denied"):
            return f"may not {verb} {inf.resource.name}: {st.get('reason') or 'no rule allows it'}"
    return None


class SharedInformer:
    """One user's handle on a process-wide informer (`shared`): reads, indices and handlers of the one
    cache, which this user sees only once its own access is known (`granted`); views, never copies."""

    def __init__(self, informer: Informer, client: Client) -> None:
        self.informer = informer
        self.client = client
        self.resource = informer.resource
        self.namespace = informer.namespace
        self.metadata_only = informer.metadata_only
        self.synced = asyncio.Event()
        self.granted = client.identity in informer.readers
        self._slots: list[list[Any]] = []  # [handlers, remover once added to the informer] of this user's
        self._pending: list[list[Any]] = []  # those added before the grant

    # ------------------------------------------------------------------ read side
    @property
    def cache(self) -> dict[str, dict[str, Any]]:
        return self.informer.cache if self.granted else {}

    @property
    def resource_version(self) -> str:
        return self.informer.resource_version if self.granted else ""

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.informer.get(name, namespace) if self.granted else None

    def list(self) -> builtins.list[dict[str, Any]]:
        return self.informer.list() if self.granted else []

    def add_index(self, name: str, fn: Callable[[dict[str, Any]], Iterable[str]]) -> None:
        if name not in self.informer._indexers:
            self.informer.add_index(name, fn)

    def by_index(self, name: str, value: str) -> builtins.list[dict[str, Any]]:
        return self.informer.by_index(name, value) if self.granted else []

    def add_handler(self, on_add: Handler | None = None, on_update: Handler | None = None,
                    on_delete: Handler | None = None) -> Callable[[], None]:
        """As `Informer.add_handler`; before the grant, kept until it (then replayed as the cache is). The
        handlers go when this user's `run` ends, or earlier by the returned remover."""
        slot: list[Any] = [(on_add, on_update, on_delete), None]
        if self.granted:
            slot[1] = self.informer.add_handler(on_add, on_update, on_delete)
        else:
            self._pending.append(slot)
        self._slots.append(slot)

        def remove() -> None:
            if slot in self._pending:
                self._pending.remove(slot)
            if slot in self._slots:
                self._slots.remove(slot)
            if slot[1] is not None:
                slot[1]()
                slot[1] = None
        return remove

    async def wait_synced(self) -> None:
        await self.synced.wait()

    # ------------------------------------------------------------------ loop
    async def run(self, ready: asyncio.Event | None = None, client: Client | None = None) -> None:
        """Check access (once per identity), then run the shared informer with `client` (default: this
        handle's) until cancelled; `ready` and `synced` are set once the cache has listed."""
        client = client or self.client
        try:
            if not self.granted:
                await self._wait_granted(client)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._mark_synced(ready))
                await self.informer.run(client=client)
        finally:  # this user is gone: its handlers too (the informer lives on for the others)
            for slot in self._slots:
                if slot[1] is not None:
                    slot[1]()
            self._slots.clear()
            self._pending.clear()

    async def _wait_granted(self, client: Client) -> None:
        backoff = 0.2
        while True:
            try:
                why = await _may_read(client, self.informer)
            except ClientError as e:
                why = f"cannot check access: {e}"
            if why is None:
                break
            log.warning("%s informer: %s; its cache stays empty for this user (retrying in %.0fs)",
                        self.resource.name, why, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, ACCESS_RETRY_MAX)
        self.informer.readers.add(client.identity)
        self.granted = True
        for slot in self._pending:
            slot[1] = self.informer.add_handler(*slot[0])
        self._pending.clear()

    async def _mark_synced(self, ready: asyncio.Event | None) -> None:
        await self.informer.synced.wait()
        self.synced.set()
        if ready is not None:
            ready.set()


Store = Informer | SharedInformer  # what components read: an informer of their own or their handle on one


class Subset:
    """The objects of an informer (a shared one, e.g. every pod) whose `index` value is `value` (pods by
    spec.nodeName), read as if an informer of their own with that field selector: `list`/`get` see only
    them, and handlers get an add when an object enters the subset (a pod bound to the node) and a delete
    when it leaves. One cache serves both the whole and the subset; handlers must be plain functions."""

    def __init__(self, informer: SharedInformer, index: str, fn: Callable[[dict[str, Any]], Iterable[str]],
                 value: str) -> None:
        self.informer = informer
        self.index, self.value = index, value
        self._in = lambda o: value in (fn(o) or ())
        informer.add_index(index, fn)

    def list(self) -> builtins.list[dict[str, Any]]:
        return self.informer.by_index(self.index, self.value)

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        obj = self.informer.get(name, namespace)
        return obj if obj is not None and self._in(obj) else None

    @property
    def synced(self) -> asyncio.Event:
        return self.informer.synced

    async def wait_synced(self) -> None:
        await self.informer.wait_synced()

    async def run(self, client: Client | None = None) -> None:
        await self.informer.run(client=client)

    def add_handler(self, on_add: Handler | None = None, on_update: Handler | None = None,
                    on_delete: Handler | None = None) -> Callable[[], None]:
        inside = self._in

        def added(obj: dict[str, Any]) -> None:
            if on_add is not None and inside(obj):
                on_add(obj)

        def updated(old: dict[str, Any], new: dict[str, Any]) -> None:
            was, now = inside(old), inside(new)
            if was and now and on_update is not None:
                on_update(old, new)
            elif now and not was and on_add is not None:
                on_add(new)
            elif was and not now and on_delete is not None:
                on_delete(old)

        def deleted(obj: dict[str, Any]) -> None:
            if on_delete is not None and inside(obj):
                on_delete(obj)
        return self.informer.add_handler(added, updated, deleted)


def pods_on_node(client: Client, node: str) -> Subset:
    """The pods bound to `node`, from the process's informer of every pod (`shared`)."""
    return Subset(shared(client, "pods"), "spec.nodeName",
                  lambda p: [n] if (n := (p.get("spec") or {}).get("nodeName")) else [], node)


class SharedInformers:
    """One informer per resource, shared by every controller that reads it; with `share` (no resync), the
    process's informers (`shared`), whose handlers the user adds through `add_handler` here and removes
    with `release` when it stops."""

    def __init__(self, client: Client, resync: float = 0.0, share: bool = False) -> None:
        self.client = client
        self.resync = resync
        self.share = share and not resync
        self._informers: dict[str, Store] = {}
        self._removers: list[Callable[[], None]] = []

    def get(self, resource: str) -> Store:
        if resource not in self._informers:
            self._informers[resource] = shared(self.client, resource) if self.share \
                else Informer(self.client, resource, resync=self.resync)
        return self._informers[resource]

    def add_handler(self, resource: str, on_add: Handler | None = None, on_update: Handler | None = None,
                    on_delete: Handler | None = None) -> None:
        """`get(resource).add_handler(...)`, removed again by `release`."""
        self._removers.append(self.get(resource).add_handler(on_add, on_update, on_delete))

    def release(self) -> None:
        """Remove the handlers added through `add_handler` (the informers may live on for others)."""
        for remove in self._removers:
            remove()
        self._removers.clear()

    async def run(self, tg: asyncio.TaskGroup) -> None:
        """Start every informer in `tg` and wait until all have listed once."""
        for name, inf in self._informers.items():
            tg.create_task(inf.run(client=self.client), name=f"informer-{name}")
        await asyncio.gather(*(inf.wait_synced() for inf in self._informers.values()))

"""The garbage collector: dependents follow their owners (ownerReferences), in all three policies.

Background: a dependent whose owners are all gone is deleted. Foreground: an
owner being deleted with the `foregroundDeletion` finalizer first has its
dependents deleted, then loses the finalizer (and so disappears). Orphan: an
owner with the `orphan` finalizer has its references removed from every
dependent, then loses the finalizer. The graph is the union of the informers'
caches, keyed by uid: the built-in kinds that most often own or are owned (RESOURCES), and every other
resource discovery lists, built-in (Leases, ServiceAccounts, Nodes...) or not (CRDs' and aggregated APIs'
kinds), that can be listed, watched and deleted, as kube's collector builds its monitors from discovery
(GetDeletableResources, less its ignored Events); the set follows discovery every 30 s and whenever a
CustomResourceDefinition changes.

The collector reads nothing but ObjectMeta (owner references, uid, finalizers, deletionTimestamp), so, as
kube's watches through metadata informers (PartialObjectMetadata), it holds only the metadata of a kind
no other component of the process watches whole; a kind another one does (pods, nodes, services...) it
reads from that component's informer, not from a second copy (`informer.shared_metadata`), switching to
it at the next discovery sync when that informer starts after the collector's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from nodeagent.api.objects import Obj
from nodeagent.api.resources import Resource
from nodeagent.client.informer import (
    SharedInformer,
    SharedInformers,
    Store,
    full_informer_running,
    key_of,
    shared_metadata,
)
from nodeagent.client.rest import Client, ClientError, resolve
from nodeagent.controllers.base import Controller
from nodeagent.controllers.podutil import release_patch

# Resources whose objects own or are owned by others.
RESOURCES = ("pods", "replicasets", "replicationcontrollers", "deployments", "daemonsets", "statefulsets",
             "jobs", "cronjobs", "configmaps", "secrets", "services", "endpointslices",
             "persistentvolumeclaims")
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
# A dependent of a kind the collector does not watch (a custom resource, say) is looked at again this often:
# its owner's deletion is no event here.
UNWATCHED_OWNER_RECHECK = 5.0
DISCOVERY_PERIOD = 30.0  # kube-controller-manager resyncs the collector's monitors with discovery this often
# kube's garbage collector.DefaultIgnoredResources: Events own nothing and are never owned
IGNORED = frozenset((("", "events"), ("events.k8s.io", "events")))
DELETABLE = frozenset(("delete", "list", "watch"))
RESTART_WATCH = 5.0
FRESH_GRAPH_WAIT = 30.0


class GarbageCollector(Controller):
    name = "garbagecollector"
    service_account = "generic-garbage-collector"
    workers = 4

    def __init__(self, client, informers: SharedInformers, recorder, options=None,
                 resources=RESOURCES) -> None:
        super().__init__(client, informers, recorder, options)
        self.resources = resources
        self._fixed = {r: resolve(r) for r in resources}  # watched whatever discovery says
        self._sources: dict[str, Store] = {}  # source key (a built-in name, or "<g>/<v>/<plural>") -> cache
        self._kind_to_resource: dict[tuple[str, str], str] = {}  # (group, kind) -> source key
        self._uids: dict[str, str] = {}  # uid -> informer cache key, for every watched object
        self._discovered: dict[tuple[str, str], Resource | None] = {}  # (apiVersion, kind) -> its resource
        # discovered resources' source keys -> the task running the informer, the remover of our handlers
        self._monitors: dict[str, tuple[asyncio.Task[None], Callable[[], None]]] = {}
        self._rediscover = asyncio.Event()
        self._syncs = 0  # discovery syncs done; `_syncing`: one under way
        self._syncing = False
        self._synced = asyncio.Condition()
        self._fresh_for: set[str] = set()  # owners whose foreground deletion saw a fresh graph

    def _watch_source(self, key: str, inf: Store) -> Callable[[], None]:
        self._sources[key] = inf
        self._kind_to_resource[(inf.resource.group, inf.resource.kind)] = key
        return inf.add_handler(lambda o: self._changed(key, o), lambda old, new: self._changed(key, new),
                               lambda o: self._deleted(key, o))

    @staticmethod
    def _group_kind(ref: dict[str, Any]) -> tuple[str, str]:
        return str(ref.get("apiVersion") or "").rpartition("/")[0], str(ref.get("kind") or "")

    async def run(self) -> None:
        """The workers, beside the loop that keeps the discovered resources watched as discovery lists them.
        Those watches (and the one of CustomResourceDefinitions that wakes the loop) go through connections
        of their own: the manager's client is shared by every controller and informer."""
        # one long-lived watch per discovered resource no other component drives: more than a pool's 32
        # (kube's collector has a watch per deletable resource too), so the pool has no limit
        watches = self.client.own_pool(max_connections=0)
        crds = shared_metadata(watches, "customresourcedefinitions")
        wake = crds.add_handler(lambda o: self._rediscover.set(), lambda old, new: self._rediscover.set(),
                                lambda o: self._rediscover.set())
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._keep_running(crds, watches), name=f"{self.name}-crds")
                for key, res in self._fixed.items():
                    self._monitor(tg, watches, key, res)
                # as kube's collector waits for its monitors' first lists before its workers start
                await asyncio.gather(*(self._sources[key].wait_synced() for key in self._fixed))
                tg.create_task(self._follow_discovery(tg, watches), name=f"{self.name}-discovery")
                await super().run()
        finally:
            wake()
            for key, (_, remove) in self._monitors.items():
                remove()
                self._sources.pop(key, None)
            self._monitors.clear()
            await watches.close()

    async def _keep_running(self, inf: SharedInformer, client: Client) -> None:
        """An informer of the collector's own, restarted after a failure (which must not stop the manager)."""
        while True:
            try:
                await inf.run(client=client)
            except Exception as e:
                self.log.warning("garbage collector: watch of %s failed (%r); restarting in %.0f s",
                                 inf.resource.name, e, RESTART_WATCH)
                await asyncio.sleep(RESTART_WATCH)

    async def _follow_discovery(self, tg: asyncio.TaskGroup, watches: Client) -> None:
        while True:
            self._rediscover.clear()
            self._syncing = True
            try:
                await self._sync_monitors(tg, watches, await self._deletable())
            except Exception as e:  # discovery failing must not stop collection of what is watched
                self.log.warning("garbage collector: discovery failed, keeping the watched resources "
                                 "(%r); retrying in %.0f s", e, DISCOVERY_PERIOD)
            finally:
                self._syncing = False
            async with self._synced:
                self._syncs += 1
                self._synced.notify_all()
            try:  # (not wait_for: on 3.11 it can swallow the manager's cancel when the event fires with it)
                async with asyncio.timeout(DISCOVERY_PERIOD):
                    await self._rediscover.wait()
            except TimeoutError:
                pass

    async def _fresh_graph(self) -> None:
        """Wait for a discovery sync begun after now and for every discovered resource's first list:
        orphaning and foreground deletion act on the whole set of dependents, as kube's collector holds
        its workers while new monitors sync (a CRD made just before its objects' owner is deleted)."""
        want = self._syncs + (2 if self._syncing else 1)
        self._rediscover.set()
        try:
            async with asyncio.timeout(FRESH_GRAPH_WAIT):
                async with self._synced:
                    await self._synced.wait_for(lambda: self._syncs >= want)
                for key in list(self._monitors):
                    source = self._sources.get(key)
                    if source is not None:
                        await source.wait_synced()
        except TimeoutError:
            self.log.warning("garbage collector: discovery or a discovered resource's list took over %.0f s; "
                             "going on with the dependents known", FRESH_GRAPH_WAIT)

    async def _deletable(self) -> dict[str, Resource]:
        """Every resource discovery lists, in its group's preferred version, that can be listed, watched and
        deleted (kube's GetDeletableResources), less the ignored ones and the kinds the fixed informers
        watch already."""
        fixed = {(r.group, r.kind) for r in self._fixed.values()}
        out: dict[str, Resource] = {}
        groups = await self.client.request("GET", "/apis")
        versions = ["v1"] + [(g.get("preferredVersion") or {}).get("groupVersion") or ""
                             for g in groups.get("groups") or ()]
        for gv in versions:
            group, _, version = gv.rpartition("/")
            if not version or (group == "" and gv != "v1"):
                continue
            try:
                doc = await self.client.request("GET", f"/apis/{gv}" if group else f"/api/{gv}")
            except ClientError as e:
                if e.not_found:
                    continue  # gone between the two reads
                raise
            for r in doc.get("resources") or ():
                name = r.get("name", "")
                if "/" in name or not DELETABLE <= set(r.get("verbs") or ()) or (group, name) in IGNORED:
                    continue
                if (group, r["kind"]) in fixed:
                    continue
                out[f"{gv}/{name}"] = Resource(group, version, name, r["kind"], bool(r.get("namespaced")))
        return out

    async def _sync_monitors(self, tg: asyncio.TaskGroup, watches: Client,
                             wanted: dict[str, Resource]) -> None:
        self._share_full_informers(tg, watches)
        for key in [k for k in self._monitors if k not in wanted and k not in self._fixed]:
            task, remove = self._monitors.pop(key)
            remove()
            task.cancel()
            gone = self._sources.pop(key).resource
            self._kind_to_resource.pop((gone.group, gone.kind), None)
            self.log.info("garbage collector: stopped watching %s (no longer served)", key)
        for key, res in wanted.items():
            if key in self._monitors:
                continue
            inf = self._monitor(tg, watches, key, res)
            self.log.info("garbage collector: watching %s%s", key, " (metadata)" if inf.metadata_only else "")

    def _monitor(self, tg: asyncio.TaskGroup, watches: Client, key: str, res: Resource) -> SharedInformer:
        """Watch `res` as the source `key`: through the process's informer of whole objects if one runs,
        else a metadata informer; run by this collector (a follower where another component drives it)."""
        inf = shared_metadata(watches, res)
        remove = self._watch_source(key, inf)
        task = tg.create_task(self._keep_running(inf, watches), name=f"gc-informer-{key}")
        self._monitors[key] = (task, remove)
        return inf

    def _share_full_informers(self, tg: asyncio.TaskGroup, watches: Client) -> None:
        """A kind this collector watches as metadata that another component now watches whole: read that
        informer instead and drop the metadata one (one cache, one watch). Its objects come as adds; what
        the metadata cache held and that one no longer does goes as deleted (its dependents looked at)."""
        for key, (task, remove) in list(self._monitors.items()):
            source = self._sources[key]
            if not source.metadata_only or not full_informer_running(watches, source.resource):
                continue
            old = dict(source.cache)
            remove()
            task.cancel()
            inf = self._monitor(tg, watches, key, source.resource)
            for k, obj in old.items():
                if k not in inf.cache:
                    self._deleted(key, obj)
            self.log.info("garbage collector: %s read from the process's informer of whole objects", key)

    # Keys are "<resource>|<namespace/name>".
    def _changed(self, resource: str, obj: Obj) -> None:
        self._uids[obj["metadata"].get("uid")] = key_of(obj)
        self.queue.add(f"{resource}|{key_of(obj)}")

    def _deleted(self, resource: str, obj: Obj) -> None:
        # An owner went away: look at its dependents.
        uid = obj["metadata"].get("uid")
        self._uids.pop(uid, None)
        self._fresh_for.discard(uid)  # a foreground owner gone some other way than its finalizer removed
        for dep_res, dep in self._dependents_of(uid):
            self.queue.add(f"{dep_res}|{key_of(dep)}")

    def _find(self, ref: dict[str, Any]) -> Obj | None:
        res = self._kind_to_resource.get(self._group_kind(ref))
        uid = ref.get("uid")
        if res is None or uid is None:
            return None
        key = self._uids.get(uid)
        obj = self._sources[res].cache.get(key) if key else None
        return obj if obj is not None and obj["metadata"].get("uid") == uid else None

    def _dependents_of(self, uid: str | None) -> list[tuple[str, Obj]]:
        out = []
        for r, inf in list(self._sources.items()):
            for o in inf.list():
                if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or []):
                    out.append((r, o))
        return out

    async def _unwatched(self, api_version: str, kind: str) -> Resource | None:
        """The resource serving `kind` in `api_version`, from discovery (as the real collector's REST mapper
        finds a custom resource's); None when the API does not serve it."""
        key = (api_version, kind)
        if key not in self._discovered:
            group, _, version = api_version.rpartition("/")
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            try:
                doc = await self.client.request("GET", path)
            except ClientError as e:
                if e.not_found:
                    return None  # not cached: the group may be served later
                raise
            found = next((r for r in doc.get("resources") or ()
                          if r.get("kind") == kind and "/" not in r.get("name", "")), None)
            if found is None:
                return None
            self._discovered[key] = Resource(group, version, found["name"], kind,
                                             bool(found.get("namespaced")))
        return self._discovered[key]

    async def _owner_exists(self, ref: dict[str, Any], namespace: str | None) -> bool:
        if self._find(ref) is not None:
            return True
        # Not in our caches (another kind, or a cache lagging behind): ask the API, by uid.
        watched = self._kind_to_resource.get(self._group_kind(ref))
        resource: str | Resource
        if watched is not None:
            resource = self._sources[watched].resource
            namespaced = resource.namespaced
        else:
            found = await self._unwatched(str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""))
            if found is None:
                return True  # a kind the API does not serve (yet) is never collected on a guess
            resource, namespaced = found, found.namespaced
        try:
            live = await self.client.get(resource, ref["name"], namespace if namespaced else None)
        except ClientError as e:
            if e.not_found:
                return False
            raise
        return live["metadata"].get("uid") == ref.get("uid")

    async def reconcile(self, key: str) -> None:
        resource, _, nskey = key.partition("|")
        ns, _, name = nskey.rpartition("/")
        source = self._sources.get(resource)
        obj = source.get(name, ns or None) if source is not None else None
        if obj is None or source is None:
            return
        res = source.resource
        meta = obj["metadata"]
        finalizers = meta.get("finalizers") or []
        if meta.get("deletionTimestamp") and FOREGROUND in finalizers:
            await self._foreground(resource, obj)
            return
        if meta.get("deletionTimestamp") and ORPHAN in finalizers:
            await self._orphan(res, obj)
            return
        if not meta.get("ownerReferences") or meta.get("deletionTimestamp"):
            return
        if any(self._find(ref) is not None for ref in meta["ownerReferences"]):
            return  # an owner is in the cache: nothing to collect (the common case, no API call)
        # Decide on the live object, not the cache: an orphaning owner may just have removed its reference.
        try:
            live = await self.client.get(res, name, ns or None)
        except ClientError as e:
            if e.not_found:
                return
            raise
        meta = live["metadata"]
        refs = meta.get("ownerReferences") or []
        if not refs or meta.get("deletionTimestamp"):
            return
        for ref in refs:
            if await self._owner_exists(ref, ns or None):
                if all(self._group_kind(r) not in self._kind_to_resource for r in refs):
                    self.queue.add_after(key, UNWATCHED_OWNER_RECHECK)  # no watch tells us when it goes
                return
        try:
            await self.client.delete(res, name, ns or None, propagation="Background",
                                     preconditions={"uid": meta["uid"],
                                                    "resourceVersion": meta["resourceVersion"]})
            self.log.info("collected %s %s: every owner is gone", resource, nskey)
        except ClientError as e:
            if not (e.not_found or e.conflict):
                raise

    async def _remove_finalizer(self, resource: Resource, obj: Obj, finalizer: str) -> None:
        meta = obj["metadata"]
        left = [f for f in meta.get("finalizers") or [] if f != finalizer]
        try:
            patch = {"metadata": {"finalizers": left or None, "resourceVersion": meta["resourceVersion"]}}
            await self.client.patch(resource, meta["name"], patch, meta.get("namespace"))
        except ClientError as e:
            if not e.not_found:
                raise

    async def _foreground(self, resource: str, owner: Obj) -> None:
        res = self._sources[resource].resource
        if owner["metadata"]["uid"] not in self._fresh_for:
            await self._fresh_graph()
            self._fresh_for.add(owner["metadata"]["uid"])
        deps = self._dependents_of(owner["metadata"]["uid"])
        blocking = 0
        for dep_res, dep in deps:
            dmeta = dep["metadata"]
            blocking += 1
            if dmeta.get("deletionTimestamp"):
                continue
            try:
                await self.client.delete(self._sources[dep_res].resource, dmeta["name"],
                                         dmeta.get("namespace"), propagation="Foreground")
            except ClientError as e:
                if not e.not_found:
                    raise
        if blocking == 0:
            await self._remove_finalizer(res, owner, FOREGROUND)
            self._fresh_for.discard(owner["metadata"]["uid"])
        else:
            self.queue.add_after(f"{resource}|{key_of(owner)}", 1.0)

    async def _delete_owner_ref(self, dep_res: str, dep: Obj, owner_uid: str) -> None:
        """Drop one owner's reference from a dependent as kube's garbage collector does: a strategic merge
        patch deleting it by uid, with the dependent's uid as precondition, so a concurrent write to the
        dependent's other references is kept; where the resource takes no strategic merge patch (415: a
        custom resource), a merge patch of the other references pinned to the resourceVersion seen."""
        res, meta = self._sources[dep_res].resource, dep["metadata"]
        try:
            await self.client.patch(res, meta["name"], release_patch(owner_uid, dep), meta.get("namespace"),
                                    patch_type="strategic")
            return
        except ClientError as e:
            if e.code != 415:
                raise
        kept = [r for r in meta.get("ownerReferences") or [] if r.get("uid") != owner_uid]
        await self.client.patch(res, meta["name"], {"metadata": {"resourceVersion": meta["resourceVersion"],
                                                                 "ownerReferences": kept or None}},
                                meta.get("namespace"))

    async def _orphan(self, resource: Resource, owner: Obj) -> None:
        uid = owner["metadata"]["uid"]
        await self._fresh_graph()
        for dep_res, dep in self._dependents_of(uid):
            try:
                await self._delete_owner_ref(dep_res, dep, uid)
            except ClientError as e:
                if not e.not_found:
                    raise
        await self._remove_finalizer(resource, owner, ORPHAN)

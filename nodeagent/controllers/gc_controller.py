"""The garbage collector: dependents follow their owners (ownerReferences), in all three policies.

Background: a dependent whose owners are all gone is deleted. Foreground: an
owner being deleted with the `foregroundDeletion` finalizer first has its
dependents deleted, then loses the finalizer (and so disappears). Orphan: an
owner with the `orphan` finalizer has its references removed from every
dependent, then loses the finalizer. The graph is the union of the informers'
caches, keyed by uid.
"""

from __future__ import annotations

from typing import Any

from nodeagent.api.objects import Obj
from nodeagent.api.resources import Resource
from nodeagent.client.informer import SharedInformers, key_of
from nodeagent.client.rest import ClientError
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


class GarbageCollector(Controller):
    name = "garbagecollector"
    service_account = "generic-garbage-collector"
    workers = 4

    def __init__(self, client, informers: SharedInformers, recorder, options=None,
                 resources=RESOURCES) -> None:
        super().__init__(client, informers, recorder, options)
        self.resources = resources
        self._kind_to_resource: dict[str, str] = {}
        self._uids: dict[str, str] = {}  # uid -> informer cache key, for every watched object
        self._discovered: dict[tuple[str, str], Resource | None] = {}  # (apiVersion, kind) -> its resource
        for r in resources:
            inf = informers.get(r)
            self._kind_to_resource[inf.resource.kind] = r
            inf.add_handler(lambda o, r=r: self._changed(r, o), lambda old, new, r=r: self._changed(r, new),
                            lambda o, r=r: self._deleted(r, o))

    # Keys are "<resource>|<namespace/name>".
    def _changed(self, resource: str, obj: Obj) -> None:
        self._uids[obj["metadata"].get("uid")] = key_of(obj)
        self.queue.add(f"{resource}|{key_of(obj)}")

    def _deleted(self, resource: str, obj: Obj) -> None:
        # An owner went away: look at its dependents.
        uid = obj["metadata"].get("uid")
        self._uids.pop(uid, None)
        for dep_res, dep in self._dependents_of(uid):
            self.queue.add(f"{dep_res}|{key_of(dep)}")

    def _find(self, uid: str | None, kind: str) -> Obj | None:
        res = self._kind_to_resource.get(kind)
        if res is None or uid is None:
            return None
        key = self._uids.get(uid)
        obj = self.informers.get(res).cache.get(key) if key else None
        return obj if obj is not None and obj["metadata"].get("uid") == uid else None

    def _dependents_of(self, uid: str | None) -> list[tuple[str, Obj]]:
        out = []
        for r in self.resources:
            for o in self.informers.get(r).list():
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
        if self._find(ref.get("uid"), ref.get("kind", "")) is not None:
            return True
        # Not in our caches (another kind, or a cache lagging behind): ask the API, by uid.
        watched = self._kind_to_resource.get(ref.get("kind", ""))
        resource: str | Resource
        if watched is not None:
            resource, namespaced = watched, self.informers.get(watched).resource.namespaced
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
        obj = self.informers.get(resource).get(name, ns or None)
        if obj is None:
            return
        meta = obj["metadata"]
        finalizers = meta.get("finalizers") or []
        if meta.get("deletionTimestamp") and FOREGROUND in finalizers:
            await self._foreground(resource, obj)
            return
        if meta.get("deletionTimestamp") and ORPHAN in finalizers:
            await self._orphan(resource, obj)
            return
        if not meta.get("ownerReferences") or meta.get("deletionTimestamp"):
            return
        if any(self._find(ref.get("uid"), ref.get("kind", "")) is not None
               for ref in meta["ownerReferences"]):
            return  # an owner is in the cache: nothing to collect (the common case, no API call)
        # Decide on the live object, not the cache: an orphaning owner may just have removed its reference.
        try:
            live = await self.client.get(resource, name, ns or None)
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
                if all(r.get("kind") not in self._kind_to_resource for r in refs):
                    self.queue.add_after(key, UNWATCHED_OWNER_RECHECK)  # no watch tells us when it goes
                return
        try:
            await self.client.delete(resource, name, ns or None, propagation="Background",
                                     preconditions={"uid": meta["uid"],
                                                    "resourceVersion": meta["resourceVersion"]})
            self.log.info("collected %s %s: every owner is gone", resource, nskey)
        except ClientError as e:
            if not (e.not_found or e.conflict):
                raise

    async def _remove_finalizer(self, resource: str, obj: Obj, finalizer: str) -> None:
        meta = obj["metadata"]
        left = [f for f in meta.get("finalizers") or [] if f != finalizer]
        try:
            patch = {"metadata": {"finalizers": left or None, "resourceVersion": meta["resourceVersion"]}}
            await self.client.patch(resource, meta["name"], patch, meta.get("namespace"))
        except ClientError as e:
            if not e.not_found:
                raise

    async def _foreground(self, resource: str, owner: Obj) -> None:
        deps = self._dependents_of(owner["metadata"]["uid"])
        blocking = 0
        for dep_res, dep in deps:
            dmeta = dep["metadata"]
            blocking += 1
            if dmeta.get("deletionTimestamp"):
                continue
            try:
                await self.client.delete(dep_res, dmeta["name"], dmeta.get("namespace"),
                                         propagation="Foreground")
            except ClientError as e:
                if not e.not_found:
                    raise
        if blocking == 0:
            await self._remove_finalizer(resource, owner, FOREGROUND)
        else:
            self.queue.add_after(f"{resource}|{key_of(owner)}", 1.0)

    async def _delete_owner_ref(self, dep_res: str, dep: Obj, owner_uid: str) -> None:
        """Drop one owner's reference from a dependent as kube's garbage collector does: a strategic merge
        patch deleting it by uid, with the dependent's uid as precondition, so a concurrent write to the
        dependent's other references is kept (the dependents here are of built-in kinds, which all take
        a strategic merge patch)."""
        await self.client.patch(dep_res, dep["metadata"]["name"], release_patch(owner_uid, dep),
                                dep["metadata"].get("namespace"), patch_type="strategic")

    async def _orphan(self, resource: str, owner: Obj) -> None:
        uid = owner["metadata"]["uid"]
        for dep_res, dep in self._dependents_of(uid):
            try:
                await self._delete_owner_ref(dep_res, dep, uid)
            except ClientError as e:
                if not e.not_found:
                    raise
        await self._remove_finalizer(resource, owner, ORPHAN)

"""The ReplicaSet reconcile loop: keeps `spec.replicas` pods for each ReplicaSet."""

from __future__ import annotations

import copy
from typing import Any

from nodeagent.api.objects import Obj
from nodeagent.client.informer import SharedInformers, key_of
from nodeagent.client.rest import ClientError
from nodeagent.clock import utcnow
from nodeagent.controllers import podutil, replicaset
from nodeagent.controllers.base import Controller, Expectations, split_key

SLOW_START_INITIAL_BATCH = 1


class ReplicaSetController(Controller):
    name = "replicaset"
    service_account = "replicaset-controller"
    workers = 4
    resource = "replicasets"  # the ReplicationController controller runs this loop over its own kind
    kind = "ReplicaSet"

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.rss = informers.get(self.resource)
        self.pods = informers.get("pods")
        self.expectations = Expectations()
        # pod keys by controlling owner uid, and controller-less pods by namespace: a reconcile
        # looks only at the pods it could own, not at every pod in the namespace.
        self._by_owner: dict[str, set[str]] = {}
        self._orphans: dict[str, set[str]] = {}
        self.rss.add_handler(self.enqueue, lambda old, new: self.enqueue(new), self._rs_deleted)
        self.pods.add_handler(self._pod_added, self._pod_updated, self._pod_deleted)

    # -- handlers: record, never write --------------------------------------------------------------
    def _rs_deleted(self, rs: Obj) -> None:
        self.expectations.forget(key_of(rs))

    def _owner_key(self, pod: Obj) -> str | None:
        ref = podutil.controller_ref(pod)
        if ref and ref.get("kind") == self.kind:
            return f"{pod['metadata'].get('namespace')}/{ref['name']}"
        return None

    def _enqueue_matching(self, pod: Obj) -> None:
        """An orphan pod: every ReplicaSet that could adopt it takes a look."""
        from nodeagent.api.selectors import from_label_selector

        ns = pod["metadata"].get("namespace")
        labels = pod["metadata"].get("labels") or {}
        for rs in self.rss.list():
            if rs["metadata"].get("namespace") == ns and from_label_selector(
                    (self.view(rs).get("spec") or {}).get("selector")).matches(labels):
                self.enqueue(rs)

    def _index(self, pod: Obj, add: bool) -> None:
        pkey = key_of(pod)
        ref = podutil.controller_ref(pod)
        bucket = (self._by_owner.setdefault(ref["uid"], set()) if ref
                  else self._orphans.setdefault(pod["metadata"].get("namespace") or "", set()))
        if add:
            bucket.add(pkey)
        else:
            bucket.discard(pkey)

    def _candidates(self, rs: Obj) -> list[Obj]:
        keys = set(self._by_owner.get(rs["metadata"].get("uid"), ())) | \
            self._orphans.get(rs["metadata"].get("namespace") or "", set())
        return [p for k in keys if (p := self.pods.cache.get(k)) is not None]

    def _pod_added(self, pod: Obj) -> None:
        self._index(pod, True)
        key = self._owner_key(pod)
        if key:
            self.expectations.observed_add(key)
            self.queue.add(key)
        elif not podutil.is_terminating(pod):
            self._enqueue_matching(pod)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        self._index(old, False)
        self._index(new, True)
        for p in (old, new):
            key = self._owner_key(p)
            if key:
                self.queue.add(key)
        if not self._owner_key(new):
            self._enqueue_matching(new)

    def _pod_deleted(self, pod: Obj) -> None:
        self._index(pod, False)
        key = self._owner_key(pod)
        if key:
            self.expectations.observed_delete(key)
            self.queue.add(key)

    def view(self, obj: Obj) -> Obj:
        """The object as the ReplicaSet logic reads it (a ReplicaSet already is one)."""
        return obj

    # -- reconcile ---------------------------------------------------------------------------------
    async def reconcile(self, key: str) -> None:
        ns, name = split_key(key)
        cached = self.rss.get(name, ns)
        if cached is None:
            self.expectations.forget(key)
            return
        rs = self.view(cached)
        plan = replicaset.plan(rs, self._candidates(rs))
        self.log.debug("%s: %d owned, create %d, delete %d, adopt %d, release %d, expectations %s", key,
                       len(plan.owned), plan.create, len(plan.delete), len(plan.adopt), len(plan.release),
                       "met" if self.expectations.satisfied(key) else "pending")
        if plan.adopt or plan.create:
            # RecheckDeletionTimestamp: the cache may not show yet that this ReplicaSet is going away
            # (it may be orphaning its pods right now); never adopt or create for a dying owner.
            try:
                live = await self.client.get(self.resource, name, ns)
            except ClientError as e:
                if e.not_found:
                    return
                raise
            if podutil.is_terminating(live) or live["metadata"].get("uid") != rs["metadata"].get("uid"):
                return
        for pod in plan.adopt:
            await self._set_owner(pod, rs, adopt=True)
        for pod in plan.release:
            await self._set_owner(pod, rs, adopt=False)
        failure = None
        if self.expectations.satisfied(key) and not podutil.is_terminating(rs):
            if plan.create:
                failure = await self._create(key, rs, plan.create)
            elif plan.delete:
                await self._delete(key, rs, plan.delete)
        await self._update_status(rs, replicaset.status(rs, plan.owned, utcnow(self.options.clock), failure))

    async def _set_owner(self, pod: Obj, rs: Obj, adopt: bool) -> None:
        """AdoptPod / ReleasePod as kube's controller_ref_manager: a strategic merge patch with the pod's uid
        as precondition, applied by the apiserver to the pod as it is now (one pinned to the informer's
        resourceVersion lost the adoption to any status write in between). A pod gone, or replaced by
        another of the same name (422 on its uid), is left alone."""
        meta = pod["metadata"]
        patch = podutil.adopt_patch(rs, pod) if adopt else podutil.release_patch(rs["metadata"]["uid"], pod)
        try:
            await self.client.patch("pods", meta["name"], patch, meta.get("namespace"),
                                    patch_type="strategic")
        except ClientError as e:
            if not (e.not_found or e.code == 422):
                raise

    async def _create(self, key: str, rs: Obj, count: int) -> str | None:
        ns = rs["metadata"].get("namespace", "default")
        template = (rs.get("spec") or {}).get("template") or {}
        errors: list[str] = []
        self.expectations.expect(key, adds=count)

        async def one() -> None:
            pod = podutil.pod_from_template(template, rs, ns, rs["metadata"]["name"])
            try:
                created = await self.client.create("pods", pod, ns)
            except ClientError as e:
                self.expectations.lower(key, adds=1)
                errors.append(e.message)
                self.recorder.record(rs, "Warning", "FailedCreate", f"Error creating: {e.message}")
                raise
            self.recorder.record(rs, "Normal", "SuccessfulCreate",
                                 f"Created pod: {created['metadata']['name']}")

        done = await podutil.slow_start_batch(count, SLOW_START_INITIAL_BATCH, one)
        skipped = count - done - len(errors)
        if skipped > 0:
            self.expectations.lower(key, adds=skipped)
        return errors[0] if errors else None

    async def _delete(self, key: str, rs: Obj, victims: list[Obj]) -> None:
        self.expectations.expect(key, deletes=len(victims))
        for pod in victims:
            meta = pod["metadata"]
            try:
                await self.client.delete("pods", meta["name"], meta.get("namespace"))
                self.recorder.record(rs, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}")
            except ClientError as e:
                self.expectations.lower(key, deletes=1)
                if not e.not_found:
                    self.recorder.record(rs, "Warning", "FailedDelete", f"Error deleting: {e.message}")
                    raise

    async def _update_status(self, rs: Obj, status: dict[str, Any]) -> None:
        if (rs.get("status") or {}) == status:
            return
        new = copy.deepcopy(rs)
        new["status"] = status
        try:
            await self.client.update_status(self.resource, new)
        except ClientError as e:
            if not e.not_found:
                raise

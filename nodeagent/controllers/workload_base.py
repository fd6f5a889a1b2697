"""What the pod-owning loops (DaemonSet, Job, StatefulSet) share: owner-keyed handlers, create/delete with
events."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from nodeagent.api.objects import Obj
from nodeagent.client.rest import ClientError
from nodeagent.controllers import podutil, revisions
from nodeagent.controllers.base import Controller, Expectations, SharedInformers


class PodOwnerController(Controller):
    """Subclasses set `resource` and `kind`; pods they control map back to their key."""

    resource = ""
    kind = ""

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.owners = informers.get(self.resource)
        self.pods = informers.get("pods")
        informers.get("controllerrevisions")
        self.expectations = Expectations(self.options.clock)
        self.owners.add_handler(self.enqueue, lambda old, new: self.enqueue(new),
                                lambda o: self.expectations.forget(f"{o['metadata'].get('namespace')}/"
                                                                   f"{o['metadata']['name']}"))
        self.pods.add_handler(self._pod_added, self._pod_updated, self._pod_deleted)

    def owner_key(self, pod: Obj) -> str | None:
        ref = podutil.controller_ref(pod)
        if ref and ref.get("kind") == self.kind:
            return f"{pod['metadata'].get('namespace')}/{ref['name']}"
        return None

    def _pod_added(self, pod: Obj) -> None:
        key = self.owner_key(pod)
        if key:
            self.expectations.observed_add(key)
            self.queue.add(key)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        key = self.owner_key(new) or self.owner_key(old)
        if key:
            self.queue.add(key)

    def _pod_deleted(self, pod: Obj) -> None:
        key = self.owner_key(pod)
        if key:
            self.expectations.observed_delete(key)
            self.queue.add(key)

    def owned_pods(self, owner: Obj) -> list[Obj]:
        ns, uid = owner["metadata"].get("namespace"), owner["metadata"].get("uid")
        return [p for p in self.pods.list() if p["metadata"].get("namespace") == ns
                and (podutil.controller_ref(p) or {}).get("uid") == uid]

    async def create_pod(self, key: str, owner: Obj, pod: Obj) -> Obj | None:
        """Create one pod (expectation raised by the caller); events either way; None when refused."""
        ns = owner["metadata"].get("namespace", "default")
        try:
            created = await self.client.create("pods", pod, ns)
        except ClientError as e:
            self.expectations.lower(key, adds=1)
            if e.already_exists:
                return None
            self.recorder.record(owner, "Warning", "FailedCreate", f"Error creating: {e.message}")
            raise
        self.recorder.record(owner, "Normal", "SuccessfulCreate",
                             f"Created pod: {created['metadata']['name']}")
        return created

    async def delete_pod(self, key: str, owner: Obj, pod: Mapping[str, Any],
                         grace_period: int | None = None) -> None:
        meta = pod["metadata"]
        try:
            await self.client.delete("pods", meta["name"], meta.get("namespace"), grace_period=grace_period)
        except ClientError as e:
            self.expectations.lower(key, deletes=1)
            if e.not_found:
                return
            self.recorder.record(owner, "Warning", "FailedDelete", f"Error deleting: {e.message}")
            raise
        self.recorder.record(owner, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}")

    async def sync_revisions(self, owner: Obj, name: str, hash_value: str, pods: list[Obj]) -> int:
        """Keep the owner's ControllerRevisions (kubectl rollout history/undo); returns the current number."""
        crs = self.informers.get("controllerrevisions")
        uid, ns = owner["metadata"].get("uid"), owner["metadata"].get("namespace")
        mine = [r for r in crs.list() if r["metadata"].get("namespace") == ns
                and (podutil.controller_ref(r) or {}).get("uid") == uid]
        in_use = {((p.get("metadata") or {}).get("labels") or {}).get(revisions.HASH_LABEL) for p in pods}
        p = revisions.plan(owner, name, hash_value, mine, in_use)
        try:
            if p.create is not None:
                await self.client.create("controllerrevisions", p.create, ns)
            if p.renumber is not None:
                rev, number = p.renumber
                await self.client.patch("controllerrevisions", rev["metadata"]["name"],
                                        {"revision": number}, ns)
            for r in p.delete:
                await self.client.delete("controllerrevisions", r["metadata"]["name"], ns)
        except ClientError as e:
            if not (e.already_exists or e.not_found or e.conflict):
                raise
        return p.number

    async def write_status(self, owner: Obj, status: dict[str, Any]) -> None:
        merged = {**(owner.get("status") or {}), **status}
        if (owner.get("status") or {}) == merged:
            return
        new = copy.deepcopy(owner)
        new["status"] = merged
        try:
            await self.client.update_status(self.resource, new)
        except ClientError as e:
            if not (e.not_found or e.conflict):
                raise
            if e.conflict:
                self.queue.add_after(f"{owner['metadata'].get('namespace')}/{owner['metadata']['name']}", 0.1)

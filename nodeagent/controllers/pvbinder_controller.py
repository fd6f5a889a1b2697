"""The PersistentVolume binder loop, and the pv-/pvc-protection loops (decisions in pvbinder.py).

Claims and volumes are queued as `claim:<ns>/<name>` and `volume:<name>`; each sync reads the caches and
writes one step (bind the volume's claimRef, then the claim's volumeName, then each one's status), so a
crash between writes is finished by the next sync, as pv_controller.go's bind is. Every claim and volume
is looked at again each `sync_period` (--pvclaimbinder-sync-period).
"""

from __future__ import annotations

import asyncio
from typing import Any

from nodeagent.api import storage
from nodeagent.api.objects import Obj
from nodeagent.client.informer import key_of
from nodeagent.client.rest import ClientError
from nodeagent.controllers import pvbinder
from nodeagent.controllers.base import Controller, SharedInformers, split_key

SYNC_PERIOD = 15.0


class PersistentVolumeBinderController(Controller):
    name = "persistentvolume-binder"
    service_account = "persistent-volume-binder"

    def __init__(self, client: Any, informers: SharedInformers, recorder: Any, options: Any = None) -> None:
        super().__init__(client, informers, recorder, options)
        self.claims = informers.get("persistentvolumeclaims")
        self.volumes = informers.get("persistentvolumes")
        self.classes = informers.get("storageclasses")
        self.claims.add_handler(self._claim, lambda old, new: self._claim(new), self._claim_gone)
        self.volumes.add_handler(self._volume, lambda old, new: self._volume(new), self._volume_gone)
        self.classes.add_handler(lambda sc: self._all_claims(), None, None)

    def _claim(self, pvc: Obj) -> None:
        self.queue.add("claim:" + key_of(pvc))
        vname = storage.spec(pvc).get("volumeName")
        if vname:
            self.queue.add("volume:" + vname)

    def _claim_gone(self, pvc: Obj) -> None:
        for pv in self.volumes.list():
            if storage.claim_ref_matches(pv, pvc):
                self.queue.add("volume:" + pv["metadata"]["name"])

    def _volume(self, pv: Obj) -> None:
        self.queue.add("volume:" + pv["metadata"]["name"])
        ref = storage.spec(pv).get("claimRef")
        if ref:
            self.queue.add(f"claim:{ref.get('namespace')}/{ref.get('name')}")
        else:  # a new Available volume may satisfy a waiting claim
            self._all_claims(unbound_only=True)

    def _volume_gone(self, pv: Obj) -> None:
        ref = storage.spec(pv).get("claimRef")
        if ref:
            self.queue.add(f"claim:{ref.get('namespace')}/{ref.get('name')}")

    def _all_claims(self, unbound_only: bool = False) -> None:
        for pvc in self.claims.list():
            if not unbound_only or not storage.spec(pvc).get("volumeName"):
                self.queue.add("claim:" + key_of(pvc))

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._resync(), name=f"{self.name}-resync")
            tg.create_task(super().run(), name=f"{self.name}-workers")

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(SYNC_PERIOD)
            self._all_claims()
            for pv in self.volumes.list():
                self.queue.add("volume:" + pv["metadata"]["name"])

    async def reconcile(self, key: str) -> None:
        kind, _, rest = key.partition(":")
        if kind == "claim":
            ns, name = split_key(rest)
            pvc = self.claims.get(name, ns)
            if pvc is not None:
                await self._sync_claim(pvc)
        else:
            pv = self.volumes.get(rest)
            if pv is not None:
                await self._sync_volume(pv)

    async def _sync_claim(self, pvc: Obj) -> None:
        classes = {c["metadata"]["name"]: c for c in self.classes.list()}
        act = pvbinder.sync_claim(pvc, self.volumes.list(), classes)
        ns = pvc["metadata"]["namespace"]
        if act.event is not None:
            self.recorder.record(pvc, act.event.type, act.event.reason, act.event.message)
        if act.annotate:
            new = dict(pvc)
            new["metadata"] = {**pvc["metadata"],
                               "annotations": {**storage.annotations_of(pvc), **act.annotate}}
            pvc = await self.client.update("persistentvolumeclaims", new, ns)
        if act.bind_to is not None:
            pv = act.bind_to
            want_pv = pvbinder.bound_volume(pv, pvc)
            if want_pv != pv:
                pv = await self.client.update("persistentvolumes", want_pv)
            if (pv.get("status") or {}).get("phase") != "Bound":
                pv = await self.client.update_status("persistentvolumes",
                                                     {**pv, "status": {**(pv.get("status") or {}),
                                                                       "phase": "Bound"}})
            want_pvc = pvbinder.bound_claim(pvc, pv)
            if want_pvc != pvc:
                pvc = await self.client.update("persistentvolumeclaims", want_pvc, ns)
            status = pvbinder.claim_status(pvc, pv, "Bound")
            if status != pvc.get("status"):
                await self.client.update("persistentvolumeclaims", {**pvc, "status": status}, ns, "status")
            return
        if act.phase is not None:
            status = pvbinder.claim_status(pvc, None, act.phase)
            if status != pvc.get("status"):
                await self.client.update("persistentvolumeclaims", {**pvc, "status": status}, ns, "status")

    async def _sync_volume(self, pv: Obj) -> None:
        ref = storage.spec(pv).get("claimRef") or {}
        claim = self.claims.get(ref["name"], ref.get("namespace")) if ref.get("name") else None
        if ref.get("uid") and claim is None:
            # the cache may lag behind a claim made a moment ago: ask the API before releasing
            try:
                claim = await self.client.get("persistentvolumeclaims", ref["name"], ref.get("namespace"))
            except ClientError as e:
                if not e.not_found:
                    raise
        act = pvbinder.sync_volume(pv, claim)
        if act.event is not None:
            self.recorder.record(pv, act.event.type, act.event.reason, act.event.message)
        if act.unbind:
            new = dict(pv)
            new["spec"] = {k: v for k, v in storage.spec(pv).items() if k != "claimRef"}
            ann = {k: v for k, v in storage.annotations_of(pv).items()
                   if k != storage.ANN_BOUND_BY_CONTROLLER}
            new["metadata"] = {**pv["metadata"], "annotations": ann}
            pv = await self.client.update("persistentvolumes", new)
        if act.phase is not None:
            status: dict[str, Any] = {"phase": act.phase}
            if act.message:
                status["message"] = act.message
            await self.client.update_status("persistentvolumes", {**pv, "status": status})


class PVProtectionController(Controller):
    """pvc-protection and pv-protection: a deleted claim keeps its finalizer while a pod uses it; a
    deleted volume keeps its finalizer while it is Bound."""

    name = "persistentvolume-protection"
    service_account = "pv-protection-controller"

    def __init__(self, client: Any, informers: SharedInformers, recorder: Any, options: Any = None) -> None:
        super().__init__(client, informers, recorder, options)
        self.claims = informers.get("persistentvolumeclaims")
        self.volumes = informers.get("persistentvolumes")
        self.pods = informers.get("pods")
        self.claims.add_handler(self._claim, lambda old, new: self._claim(new), None)
        self.volumes.add_handler(self._volume, lambda old, new: self._volume(new), None)
        self.pods.add_handler(self._pod, lambda old, new: self._pod(new), self._pod)

    def _claim(self, pvc: Obj) -> None:
        if storage.meta(pvc).get("deletionTimestamp"):
            self.queue.add("claim:" + key_of(pvc))

    def _volume(self, pv: Obj) -> None:
        if storage.meta(pv).get("deletionTimestamp"):
            self.queue.add("volume:" + pv["metadata"]["name"])

    def _pod(self, pod: Obj) -> None:
        ns = (pod.get("metadata") or {}).get("namespace")
        for v in (pod.get("spec") or {}).get("volumes") or []:
            src = v.get("persistentVolumeClaim")
            if src:
                self.queue.add(f"claim:{ns}/{src.get('claimName')}")

    async def reconcile(self, key: str) -> None:
        kind, _, rest = key.partition(":")
        if kind == "claim":
            ns, name = split_key(rest)
            pvc = self.claims.get(name, ns)
            if pvc is None or not storage.meta(pvc).get("deletionTimestamp"):
                return
            if pvbinder.claim_in_use(pvc, self.pods.list()):
                return
            # the cache may miss a pod made a moment ago (pvc-protection asks the API too)
            live = await self.client.list("pods", ns)
            if pvbinder.claim_in_use(pvc, live.get("items") or []):
                return
            new = pvbinder.without_finalizer(pvc, storage.PVC_PROTECTION)
            if new is not None:
                await self._update("persistentvolumeclaims", new, ns)
        else:
            pv = self.volumes.get(rest)
            if pv is None or not storage.meta(pv).get("deletionTimestamp"):
                return
            if (pv.get("status") or {}).get("phase") == "Bound":
                return
            new = pvbinder.without_finalizer(pv, storage.PV_PROTECTION)
            if new is not None:
                await self._update("persistentvolumes", new, None)

    async def _update(self, resource: str, obj: dict[str, Any], ns: str | None) -> None:
        try:
            await self.client.update(resource, obj, ns)
        except ClientError as e:
            if not e.not_found:
                raise

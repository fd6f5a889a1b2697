"""The StatefulSet loop: stable <name>-<ordinal> pods, created and removed in order (decisions in
statefulset.py)."""

from __future__ import annotations

from typing import Any

from nodeagent.api.objects import Obj
from nodeagent.client.rest import ClientError
from nodeagent.controllers import podutil, statefulset
from nodeagent.controllers.base import SharedInformers, split_key
from nodeagent.controllers.workload_base import PodOwnerController


class StatefulSetController(PodOwnerController):
    name = "statefulset"
    service_account = "statefulset-controller"
    resource = "statefulsets"
    kind = "StatefulSet"

    def __init__(self, client: Any, informers: SharedInformers, recorder: Any, options: Any = None) -> None:
        super().__init__(client, informers, recorder, options)
        self.claims = informers.get("persistentvolumeclaims")

    async def reconcile(self, key: str) -> None:
        ns, name = split_key(key)
        sts = self.owners.get(name, ns)
        if sts is None:
            return
        pods = self.owned_pods(sts)
        p = statefulset.plan(sts, pods)
        rev = statefulset.revision(sts)
        if not podutil.is_terminating(sts):
            await self.sync_revisions(sts, rev, rev, pods)
            await self._sync_claim_owners(sts, pods)
        if self.expectations.satisfied(key) and not podutil.is_terminating(sts):
            if p.create:
                self.expectations.expect(key, adds=len(p.create))
                for i in p.create:
                    await self._ensure_claims(sts, i)
                    await self.create_pod(key, sts, statefulset.pod_for_ordinal(sts, i, rev))
            if p.delete:
                self.expectations.expect(key, deletes=len(p.delete))
                for pod in p.delete:
                    await self.delete_pod(key, sts, pod)
        await self.write_status(sts, p.status)

    async def _sync_claim_owners(self, sts: Obj, pods: list[Obj]) -> None:
        """persistentVolumeClaimRetentionPolicy: each existing pod's claims carry the owner references the
        policy asks for (the set's for whenDeleted: Delete, a condemned pod's for whenScaled: Delete)."""
        for pod in pods:
            i = statefulset.ordinal(sts["metadata"]["name"], pod)
            if i is None:
                continue
            for want in statefulset.claims_for(sts, i):
                claim = self.claims.get(want["metadata"]["name"], want["metadata"]["namespace"])
                if claim is None or podutil.is_terminating(claim):
                    continue
                refs = statefulset.claim_owner_refs(sts, claim, pod)
                if refs != (claim["metadata"].get("ownerReferences") or []):
                    new = {**claim, "metadata": {**claim["metadata"], "ownerReferences": refs}}
                    try:
                        await self.client.update("persistentvolumeclaims", new)
                    except ClientError as e:
                        if not (e.not_found or e.conflict):
                            raise

    async def _ensure_claims(self, sts: Obj, i: int) -> None:
        for claim in statefulset.claims_for(sts, i):
            existing = self.claims.get(claim["metadata"]["name"], claim["metadata"]["namespace"])
            if existing is not None:
                if podutil.is_terminating(existing):
                    # the old claim is still going (whenScaled/whenDeleted: Delete): the pod waits for it
                    raise RuntimeError(f"pvc {claim['metadata']['name']} is being deleted")
                continue
            refs = statefulset.claim_owner_refs(sts, claim, None)
            if refs:
                claim["metadata"]["ownerReferences"] = refs
            try:
                await self.client.create("persistentvolumeclaims", claim, claim["metadata"]["namespace"])
                self.recorder.record(sts, "Normal", "SuccessfulCreate",
                                     f"create Claim {claim['metadata']['name']} Pod "
                                     f"{sts['metadata']['name']}-{i} in StatefulSet "
                                     f"{sts['metadata']['name']} success")
            except ClientError as e:
                if not e.already_exists:
                    self.recorder.record(sts, "Warning", "FailedCreate",
                                         f"create Claim {claim['metadata']['name']} failed: {e.message}")
                    raise

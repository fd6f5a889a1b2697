"""The ephemeral volume controller (kube-controller-manager's `ephemeral-volume`): for each generic
ephemeral volume of a pod (`volumes[].ephemeral`), the claim `<pod>-<volume>` made from its
volumeClaimTemplate, owned by the pod (controller: true), so it is deleted with the pod by the garbage
collector. A claim of that name that the pod does not own is left alone, with an event saying so (the
kubelet refuses to mount it)."""

from __future__ import annotations

import copy
from typing import Any

from nodeagent.client.rest import ClientError
from nodeagent.controllers.base import Controller, SharedInformers, split_key


def claims_for(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The claims a pod's ephemeral volumes need (ephemeral.go's handleVolume)."""
    meta = pod.get("metadata") or {}
    out = []
    for v in (pod.get("spec") or {}).get("volumes") or []:
        eph = v.get("ephemeral")
        if eph is None:
            continue
        tpl = copy.deepcopy((eph or {}).get("volumeClaimTemplate") or {})
        tmeta = tpl.get("metadata") or {}
        out.append({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"{meta.get('name')}-{v.get('name')}", "namespace": meta.get("namespace"),
                         "labels": tmeta.get("labels") or {}, "annotations": tmeta.get("annotations") or {},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"),
                                              "uid": meta.get("uid"), "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": tpl.get("spec") or {}})
    return out


def owned_by(pvc: dict[str, Any], pod: dict[str, Any]) -> bool:
    uid = (pod.get("metadata") or {}).get("uid")
    return any(o.get("uid") == uid and o.get("controller")
               for o in (pvc.get("metadata") or {}).get("ownerReferences") or [])


class EphemeralVolumeController(Controller):
    name = "ephemeral-volume"
    service_account = "ephemeral-volume-controller"

    def __init__(self, client: Any, informers: SharedInformers, recorder: Any, options: Any = None) -> None:
        super().__init__(client, informers, recorder, options)
        self.pods = informers.get("pods")
        self.claims = informers.get("persistentvolumeclaims")
        self.pods.add_handler(self._pod, lambda old, new: self._pod(new), None)
        self.claims.add_handler(None, None, self._claim_gone)

    def _pod(self, pod: dict[str, Any]) -> None:
        if any("ephemeral" in v for v in (pod.get("spec") or {}).get("volumes") or []):
            self.enqueue(pod)

    def _claim_gone(self, pvc: dict[str, Any]) -> None:
        for o in (pvc.get("metadata") or {}).get("ownerReferences") or []:
            if o.get("kind") == "Pod" and o.get("controller"):
                self.queue.add(f"{pvc['metadata'].get('namespace')}/{o.get('name')}")

    async def reconcile(self, key: str) -> None:
        ns, name = split_key(key)
        pod = self.pods.get(name, ns)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        for want in claims_for(pod):
            have = self.claims.get(want["metadata"]["name"], ns)
            if have is not None:
                if not owned_by(have, pod):
                    self.recorder.record(pod, "Warning", "FailedBinding",
                                         f"PVC {ns}/{want['metadata']['name']} was not created for pod "
                                         f"{ns}/{name} (pod is not owner)")
                continue
            try:
                await self.client.create("persistentvolumeclaims", want, ns)
            except ClientError as e:
                if e.already_exists:
                    continue
                self.recorder.record(pod, "Warning", "FailedCreate",
                                     f"create PVC {want['metadata']['name']}: {e.message}")
                raise

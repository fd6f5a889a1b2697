"""VolumeRestrictions: a ReadWriteOncePod claim serves one pod in the whole cluster.

kube-scheduler's PreFilter rejects a pod whose ReadWriteOncePod claim another (assigned, live) pod
already uses. Its other half, conflicting mounts of the same GCE PD / AWS EBS / RBD / iSCSI disk on one
node, concerns volume types this kubelet does not mount (it refuses them with FailedMount), so no node
can hold such a conflict.
"""

from __future__ import annotations

from typing import Any

from nodeagent.api import storage
from nodeagent.scheduler.framework import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    PodInfo,
    PreFilterResult,
    Status,
    skip,
    unschedulable,
)
from nodeagent.scheduler.plugins.volumebinding import claim_names

NAME = "VolumeRestrictions"
ERR_RWOP = "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"


class VolumeRestrictions:
    name = NAME

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status | None]:
        api = self.handle.api.volumes
        names = claim_names(pod.pod)
        if api is None or not names:
            return None, skip(NAME)
        rwop = set()
        for n in names:
            pvc = api.claim(pod.namespace, n)
            if pvc is not None and "ReadWriteOncePod" in (storage.spec(pvc).get("accessModes") or []):
                rwop.add(n)
        if not rwop:
            return None, skip(NAME)
        for ni in self.handle.snapshot.nodes:
            for other in ni.pods.values():
                if other.uid == pod.uid or other.namespace != pod.namespace or other.deleting:
                    continue
                if rwop.intersection(claim_names(other.pod)):
                    return None, unschedulable(NAME, ERR_RWOP)
        return None, skip(NAME)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Pod", ActionType.DELETE)),
                ClusterEventWithHint(ClusterEvent("PersistentVolumeClaim",
                                                  ActionType.ADD | ActionType.UPDATE))]


def new(args: None, handle: Any) -> VolumeRestrictions:
    return VolumeRestrictions(handle)

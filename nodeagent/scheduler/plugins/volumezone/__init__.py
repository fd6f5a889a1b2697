"""VolumeZone: a pod's bound volumes labelled with a zone or region only fit nodes in that zone or region.

kube-scheduler's plugin: for each bound PersistentVolume of the pod carrying `topology.kubernetes.io/zone`
or `/region` (or their failure-domain.beta.kubernetes.io forms), the node's label of the same key must be
one of the volume's values (a volume may list several, joined by `__`). Unbound WaitForFirstConsumer
claims are VolumeBinding's business.
"""

from __future__ import annotations

from typing import Any

from nodeagent.api import storage
from nodeagent.scheduler.framework import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    NodeInfo,
    PodInfo,
    PreFilterResult,
    Status,
    skip,
    unresolvable,
)
from nodeagent.scheduler.plugins.volumebinding import claim_names

NAME = "VolumeZone"
ERR_ZONE = "node(s) had no available volume zone"
ADD_OR_UPDATE = ActionType.ADD | ActionType.UPDATE
TOPOLOGY_LABELS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/region",
                   "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region")


def volume_topology(pv: dict[str, Any]) -> dict[str, set[str]]:
    labels = storage.meta(pv).get("labels") or {}
    return {k: set(str(labels[k]).split("__")) for k in TOPOLOGY_LABELS if labels.get(k)}


class VolumeZone:
    name = NAME

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status | None]:
        api = self.handle.api.volumes
        names = claim_names(pod.pod)
        if api is None or not names:
            return None, skip(NAME)
        vols = {storage.meta(v).get("name"): v for v in api.volumes()}
        want: list[dict[str, set[str]]] = []
        for n in names:
            pvc = api.claim(pod.namespace, n)
            vname = storage.spec(pvc).get("volumeName") if pvc else None
            pv = vols.get(vname) if vname else None
            if pv is not None:
                topo = volume_topology(pv)
                if topo:
                    want.append(topo)
        if not want:
            return None, skip(NAME)
        state[NAME] = want
        return None, None

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        for topo in state.get(NAME) or ():
            for key, values in topo.items():
                if node.labels.get(key) not in values:
                    return unresolvable(NAME, ERR_ZONE)
        return None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE_NODE_LABEL)),
                ClusterEventWithHint(ClusterEvent("PersistentVolumeClaim", ADD_OR_UPDATE)),
                ClusterEventWithHint(ClusterEvent("PersistentVolume", ADD_OR_UPDATE))]


def new(args: None, handle: Any) -> VolumeZone:
    return VolumeZone(handle)

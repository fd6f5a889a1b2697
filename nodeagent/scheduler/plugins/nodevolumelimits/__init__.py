"""NodeVolumeLimits (kube-scheduler's CSI volume limits): a node takes no more volumes of a CSI driver than
its CSINode allows (`spec.drivers[].allocatable.count`, from the driver's NodeGetInfo max_volumes_per_node).

A pod's CSI volumes are its claims bound to a PV with `spec.csi` (counted by volume handle), its unbound
claims whose class names a CSI driver (counted by claim), and its inline CSI volumes; the volumes already
on the node are counted the same way from its pods, each unique volume once. A node without a CSINode, or
a driver without a count, has no limit.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    unschedulable,
)

NAME = "NodeVolumeLimits"
ERR_MAX_VOLUME_COUNT = "node(s) exceed max volume count"


def csi_volumes(pod: Mapping[str, Any], api: Any) -> dict[str, str]:
    """The pod's CSI volumes: {unique volume id: driver}."""
    meta = pod.get("metadata") or {}
    ns, name = meta.get("namespace") or "default", meta.get("name", "")
    out: dict[str, str] = {}
    for v in (pod.get("spec") or {}).get("volumes") or []:
        if v.get("csi"):
            out[f"inline/{ns}/{name}/{v.get('name')}"] = v["csi"].get("driver", "")
            continue
        if v.get("persistentVolumeClaim"):
            claim = v["persistentVolumeClaim"].get("claimName", "")
        elif v.get("ephemeral") is not None:
            claim = f"{name}-{v.get('name')}"
        else:
            continue
        pvc = api.claim(ns, claim)
        if pvc is None:
            continue
        vname = storage.spec(pvc).get("volumeName")
        pv = next((p for p in api.volumes() if storage.meta(p).get("name") == vname), None) if vname else None
        if pv is not None:
            src = storage.spec(pv).get("csi")
            if src:
                out[f"{src.get('driver')}/{src.get('volumeHandle')}"] = src.get("driver", "")
            continue
        sc = api.storage_class(storage.claim_class(pvc)) if storage.claim_class(pvc) else None
        if sc is not None and sc.get("provisioner"):
            out[f"claim/{ns}/{claim}"] = sc["provisioner"]
    return out


def limits(csinode: Mapping[str, Any] | None) -> dict[str, int]:
    out = {}
    for d in ((csinode or {}).get("spec") or {}).get("drivers") or []:
        count = (d.get("allocatable") or {}).get("count")
        if isinstance(count, int):
            out[d.get("name", "")] = count
    return out


class NodeVolumeLimits:
    name = NAME

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status | None]:
        api = self.handle.api.volumes
        if api is None:
            return None, skip(NAME)
        mine = csi_volumes(pod.pod, api)
        if not mine:
            return None, skip(NAME)
        state[NAME] = mine
        return None, None

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        mine: dict[str, str] = state.get(NAME) or {}
        cap = limits(self.handle.api.volumes.csinode(node.name))
        if not mine or not cap:
            return None
        on_node: dict[str, str] = {}
        for other in node.pods.values():
            if other.uid != pod.uid:
                on_node.update(csi_volumes(other.pod, self.handle.api.volumes))
        for driver, limit in cap.items():
            new = {v for v, d in mine.items() if d == driver and v not in on_node}
            if not new:
                continue
            used = sum(1 for d in on_node.values() if d == driver)
            if used + len(new) > limit:
                return unschedulable(NAME, ERR_MAX_VOLUME_COUNT)
        return None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Pod", ActionType.DELETE)),
                ClusterEventWithHint(ClusterEvent("CSINode", ActionType.ADD | ActionType.UPDATE)),
                ClusterEventWithHint(ClusterEvent("PersistentVolumeClaim", ActionType.ADD)),
                ClusterEventWithHint(ClusterEvent("PersistentVolume", ActionType.ADD))]


def new(args: None, handle: Any) -> NodeVolumeLimits:
    return NodeVolumeLimits(handle)

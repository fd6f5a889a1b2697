"""VolumeBinding: a pod's claims must be bound, or bindable on the node, before the pod goes there.

kube-scheduler's plugin (PreFilter/Filter/Reserve/PreBind/Unreserve over its volume binder):
- PreFilter sorts the pod's claims into bound ones and ones waiting for their first consumer
  (WaitForFirstConsumer); an unbound Immediate claim or a missing claim rejects the pod outright;
- Filter checks, per node, that bound volumes' nodeAffinity admits it, and that every waiting claim has
  either a matching Available volume there (smallest fit, FindMatchingVolume) or a class that can
  provision;
- Reserve remembers the node's choices and assumes the chosen volumes (no other pod takes them);
- PreBind writes them: a chosen volume's claimRef (the PV controller finishes the bind), or the claim's
  `volume.kubernetes.io/selected-node` (the provisioner makes a volume there); then waits until every
  claim is bound (bindTimeoutSeconds);
- Unreserve forgets the assumptions.
"""

from __future__ import annotations

import asyncio
import dataclasses
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
    unresolvable,
)
from nodeagent.scheduler.framework.status import error

NAME = "VolumeBinding"
ERR_NODE_CONFLICT = "node(s) had volume node affinity conflict"
ERR_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ERR_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
POLL = 0.1


@dataclasses.dataclass
class Args:
    bind_timeout_seconds: int = 600


def validate(args: Args) -> list[str]:
    return [] if args.bind_timeout_seconds >= 0 else ["bindTimeoutSeconds must not be negative"]


@dataclasses.dataclass
class NodeChoice:
    """What PreBind writes for one node: (claim, volume) binds and claims to provision there."""
    static: list[tuple[dict[str, Any], dict[str, Any]]] = dataclasses.field(default_factory=list)
    dynamic: list[dict[str, Any]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _State:
    bound: list[tuple[dict[str, Any], dict[str, Any] | None]]  # (claim, its volume)
    to_bind: list[dict[str, Any]]  # WaitForFirstConsumer claims without a volume
    choices: dict[str, NodeChoice] = dataclasses.field(default_factory=dict)
    reserved: NodeChoice | None = None

    def clone(self) -> _State:
        return self  # per-node choices are keyed by node: what-ifs may share them


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The claims a pod uses: persistentVolumeClaim volumes and generic ephemeral ones (<pod>-<volume>)."""
    name = (pod.get("metadata") or {}).get("name", "")
    out = []
    for v in (pod.get("spec") or {}).get("volumes") or []:
        if v.get("persistentVolumeClaim"):
            out.append(v["persistentVolumeClaim"].get("claimName", ""))
        elif v.get("ephemeral") is not None:
            out.append(f"{name}-{v.get('name')}")
    return out


class VolumeBinding:
    name = NAME

    def __init__(self, args: Args, handle: Any) -> None:
        self.args = args
        self.handle = handle
        self.assumed: dict[str, str] = {}  # volume name → claim key it is reserved for

    @property
    def _api(self) -> Any:
        return self.handle.api.volumes

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status | None]:
        names = claim_names(pod.pod)
        api = self._api
        if not names or api is None:
            return None, skip(NAME)
        bound: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        to_bind: list[dict[str, Any]] = []
        vols = {storage.meta(v).get("name"): v for v in api.volumes()}
        for n in names:
            pvc = api.claim(pod.namespace, n)
            if pvc is None:
                return None, unresolvable(NAME, f'persistentvolumeclaim "{n}" not found')
            if storage.meta(pvc).get("deletionTimestamp"):
                return None, unresolvable(NAME, f'persistentvolumeclaim "{n}" is being deleted')
            vname = storage.spec(pvc).get("volumeName")
            if vname:
                bound.append((pvc, vols.get(vname)))
                continue
            sc = api.storage_class(storage.claim_class(pvc)) if storage.claim_class(pvc) else None
            if storage.binding_mode(sc) == "WaitForFirstConsumer":
                to_bind.append(pvc)
            else:
                return None, unresolvable(NAME, ERR_UNBOUND_IMMEDIATE)
        state[NAME] = _State(bound, to_bind)
        return None, None

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        st: _State | None = state.get(NAME)
        if st is None:
            return None
        for pvc, pv in st.bound:
            if pv is None:
                return unresolvable(NAME, f'persistentvolume "{storage.spec(pvc).get("volumeName")}" '
                                          "not found")
            if not storage.node_affinity_allows(pv, node.node):
                return unresolvable(NAME, ERR_NODE_CONFLICT)
        if not st.to_bind:
            return None
        api = self._api
        choice = NodeChoice()
        volumes = api.volumes()
        taken = list(self.assumed)
        for pvc in st.to_bind:
            key = f"{storage.meta(pvc).get('namespace')}/{storage.meta(pvc).get('name')}"
            excluded = [v for v in taken if self.assumed.get(v) != key] + \
                [storage.meta(pv).get("name", "") for _, pv in choice.static]
            match = storage.find_matching_volume(pvc, volumes, node.node, excluded)
            if match is not None:
                choice.static.append((pvc, dict(match)))
                continue
            sc = api.storage_class(storage.claim_class(pvc))
            if sc is None or sc.get("provisioner") in (None, "", NO_PROVISIONER) \
                    or not _topology_allows(sc, node.node):
                return unresolvable(NAME, ERR_BIND_CONFLICT)
            choice.dynamic.append(pvc)
        st.choices[node.name] = choice
        return None

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        st: _State | None = state.get(NAME)
        if st is None or not st.to_bind:
            return None
        choice = st.choices.get(node_name)
        if choice is None:
            return error(NAME, f"no volume choices recorded for node {node_name}")
        for pvc, pv in choice.static:
            self.assumed[storage.meta(pv).get("name", "")] = \
                f"{storage.meta(pvc).get('namespace')}/{storage.meta(pvc).get('name')}"
        st.reserved = choice
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        st: _State | None = state.get(NAME)
        if st is None or st.reserved is None:
            return
        for _, pv in st.reserved.static:
            self.assumed.pop(storage.meta(pv).get("name", ""), None)
        st.reserved = None

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        st: _State | None = state.get(NAME)
        if st is None or st.reserved is None:
            return None
        api = self._api
        try:
            for pvc, pv in st.reserved.static:
                await api.bind_volume(pv, pvc)
            for pvc in st.reserved.dynamic:
                await api.select_node(pvc, node_name)
            waiting = [storage.meta(c).get("name", "") for c, _ in st.reserved.static] + \
                [storage.meta(c).get("name", "") for c in st.reserved.dynamic]
            try:
                async with asyncio.timeout(self.args.bind_timeout_seconds):
                    while waiting:
                        waiting = [n for n in waiting if not _fully_bound(api, pod.namespace, n)]
                        for n in waiting:
                            c = api.claim(pod.namespace, n)
                            if c is None or storage.meta(c).get("deletionTimestamp"):
                                return error(NAME, f'persistentvolumeclaim "{n}" was deleted while binding')
                        if waiting:
                            await asyncio.sleep(POLL)
            except TimeoutError:
                return error(NAME, "binding volumes: context deadline exceeded")
        finally:
            for _, pv in st.reserved.static:
                self.assumed.pop(storage.meta(pv).get("name", ""), None)
        return None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(kind, ActionType.ADD | ActionType.UPDATE))
                for kind in ("PersistentVolumeClaim", "PersistentVolume", "StorageClass", "CSINode")] + \
            [ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE_NODE_LABEL))]


def _fully_bound(api: Any, namespace: str, name: str) -> bool:
    c = api.claim(namespace, name)
    return bool(c and storage.spec(c).get("volumeName") and (c.get("status") or {}).get("phase") == "Bound")


def _topology_allows(sc: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """allowedTopologies: a node must match one term (each expression's key among the node's labels with
    one of the values)."""
    terms = sc.get("allowedTopologies")
    if not terms:
        return True
    labels = (node.get("metadata") or {}).get("labels") or {}
    for t in terms:
        exprs = t.get("matchLabelExpressions") or []
        if all(labels.get(e.get("key")) in (e.get("values") or []) for e in exprs):
            return True
    return False


def new(args: Args | None, handle: Any) -> VolumeBinding:
    return VolumeBinding(args or Args(), handle)

"""The scheduler's cache: NodeInfos with their pods (bound and assumed), kept up to date by events.

assume_pod puts a pod on its chosen node before the bind call returns, so the next cycle sees
the capacity as taken; forget_pod undoes it when binding fails; the pod's own add event from
the API confirms it. The snapshot a cycle reads is a view over these NodeInfos: the scheduling
cycle runs synchronously on the event loop, so nothing mutates the cache while it reads, and
preemption's what-ifs work on clones. Per-node aggregates are updated incrementally; only node
additions/removals rebuild the node list.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from nodeagent.clock import REAL_CLOCK, Clock
from nodeagent.scheduler.framework.types import NodeInfo, PodInfo, pod_uid

log = logging.getLogger("nodeagent.scheduler.cache")


@dataclasses.dataclass
class _PodState:
    pod: PodInfo
    assumed: bool
    binding_finished: bool = False
    deadline: float | None = None


class Snapshot:
    """What one scheduling cycle sees: the node list (stable order) and derived indexes."""

    def __init__(self, cache: Cache):
        self._cache = cache
        self.nodes: list[NodeInfo] = []
        self.num_nodes = 0

    def get(self, name: str) -> NodeInfo | None:
        ni = self._cache.nodes.get(name)
        return ni if ni is not None and ni.node else None

    def nodes_with_affinity(self) -> list[NodeInfo]:
        """Nodes with pods whose affinity terms score other pods (required affinity, preferred terms)."""
        return [ni for ni in self._cache.affinity_nodes.values() if ni.node]

    def nodes_with_required_anti_affinity(self) -> list[NodeInfo]:
        return [ni for ni in self._cache.anti_affinity_nodes.values() if ni.node]

    def any_required_anti_affinity(self) -> bool:
        return any(ni.node for ni in self._cache.anti_affinity_nodes.values())

    def changes_since(self, seq: int) -> tuple[int, list[NodeInfo] | None]:
        """The cache's log of changed NodeInfos (Cache.changes_since)."""
        return self._cache.changes_since(seq)

    @property
    def any_filter_taints(self) -> bool:
        return bool(self._cache.filter_tainted)

    @property
    def any_prefer_taints(self) -> bool:
        return bool(self._cache.prefer_tainted)

    @property
    def any_unschedulable(self) -> bool:
        return bool(self._cache.cordoned)

    def image_nodes(self, image: str) -> int:
        return len(self._cache.image_nodes.get(image, ()))


class Cache:
    def __init__(self, clock: Clock | None = None, assumed_ttl: float = 0.0,
                 taints_from_conditions: bool = True):
        self.clock = clock or REAL_CLOCK
        self.assumed_ttl = assumed_ttl  # 0: assumed pods never expire (kube-scheduler's default)
        self.taints_from_conditions = taints_from_conditions
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, _PodState] = {}
        self.affinity_nodes: dict[str, NodeInfo] = {}
        self.anti_affinity_nodes: dict[str, NodeInfo] = {}
        self.image_nodes: dict[str, set[str]] = {}
        # nodes with NoSchedule/NoExecute taints, PreferNoSchedule taints, or cordoned: lets plugins
        # skip whole passes when no node in the cluster has any
        self.filter_tainted: set[str] = set()
        self.prefer_tainted: set[str] = set()
        self.cordoned: set[str] = set()
        self._snapshot = Snapshot(self)
        self._nodes_changed = True
        # every NodeInfo changed (a pod placed or removed, the node updated), in order, numbered from
        # _changes_base: the cycle memo (cyclememo.py) forgets those nodes' answers (a node added or
        # removed makes a new snapshot list instead, which it starts afresh from)
        self._changes: list[NodeInfo] = []
        self._changes_base = 0

    # -- what changed --------------------------------------------------------------------------------

    MAX_CHANGES = 50_000  # the log is dropped past this; a reader behind it starts afresh

    def _changed(self, ni: NodeInfo) -> None:
        ch = self._changes
        if len(ch) >= self.MAX_CHANGES:
            self._changes_base += len(ch)
            ch.clear()
        ch.append(ni)

    def changes_since(self, seq: int) -> tuple[int, list[NodeInfo] | None]:
        """(the current sequence number, the NodeInfos changed since `seq`); None instead of the list
        when the log no longer reaches back to `seq`."""
        base = self._changes_base
        now = base + len(self._changes)
        if seq < base:
            return now, None
        return now, self._changes[seq - base:]

    # -- nodes ---------------------------------------------------------------------------------------

    def add_node(self, node: dict[str, Any]) -> NodeInfo:
        name = node["metadata"]["name"]
        ni = self.nodes.get(name)
        if ni is None:
            ni = self.nodes[name] = NodeInfo()
        else:
            self._drop_images(ni)
        had = bool(ni.node)
        ni.set_node(node, self.taints_from_conditions)
        for flag, s in ((ni.filter_taints, self.filter_tainted), (ni.prefer_taints, self.prefer_tainted),
                        (ni.unschedulable, self.cordoned)):
            if flag:
                s.add(name)
            else:
                s.discard(name)
        for img in ni.images:
            self.image_nodes.setdefault(img, set()).add(name)
        if not had:
            self._nodes_changed = True
        self._changed(ni)
        return ni

    update_node = add_node

    def remove_node(self, name: str) -> None:
        ni = self.nodes.get(name)
        if ni is None:
            return
        self._drop_images(ni)
        self.filter_tainted.discard(name)
        self.prefer_tainted.discard(name)
        self.cordoned.discard(name)
        if ni.pods:  # pods still bound there: keep a node-less NodeInfo until they go
            ni.node = {}
            ni.generation += 1
        else:
            del self.nodes[name]
            self.affinity_nodes.pop(name, None)
            self.anti_affinity_nodes.pop(name, None)
        self._nodes_changed = True

    def _drop_images(self, ni: NodeInfo) -> None:
        for img in ni.images:
            s = self.image_nodes.get(img)
            if s:
                s.discard(ni.name)
                if not s:
                    del self.image_nodes[img]

    # -- pods ----------------------------------------------------------------------------------------

    def _node_for(self, name: str) -> NodeInfo:
        ni = self.nodes.get(name)
        if ni is None:
            ni = self.nodes[name] = NodeInfo()
            ni.name = name
        return ni

    def _place(self, p: PodInfo) -> None:
        ni = self._node_for(p.node_name)
        ni.add_pod(p)
        self._changed(ni)
        self._index(ni)

    def _unplace(self, p: PodInfo) -> None:
        ni = self.nodes.get(p.node_name)
        if ni is None:
            return
        ni.remove_pod(p)
        self._changed(ni)
        self._index(ni)
        if not ni.node and not ni.pods:
            del self.nodes[p.node_name]

    def _index(self, ni: NodeInfo) -> None:
        if ni.pods_with_affinity:
            self.affinity_nodes[ni.name] = ni
        else:
            self.affinity_nodes.pop(ni.name, None)
        if ni.pods_with_required_anti_affinity:
            self.anti_affinity_nodes[ni.name] = ni
        else:
            self.anti_affinity_nodes.pop(ni.name, None)

    def assume_pod(self, p: PodInfo) -> None:
        """Count the pod on p.node_name now; the bind happens later."""
        if p.uid in self.pods:
            raise ValueError(f"pod {p.key} is already in the cache, so can't be assumed")
        self._place(p)
        self.pods[p.uid] = _PodState(p, assumed=True)

    def finish_binding(self, uid: str) -> None:
        st = self.pods.get(uid)
        if st is not None and st.assumed:
            st.binding_finished = True
            if self.assumed_ttl > 0:
                st.deadline = self.clock.monotonic() + self.assumed_ttl

    def forget_pod(self, p: PodInfo) -> None:
        st = self.pods.get(p.uid)
        if st is None:
            return
        if not st.assumed:
            raise ValueError(f"pod {p.key} wasn't assumed so cannot be forgotten")
        self._unplace(st.pod)
        del self.pods[p.uid]

    def is_assumed(self, uid: str) -> bool:
        st = self.pods.get(uid)
        return st is not None and st.assumed

    def add_pod(self, pod: dict[str, Any]) -> PodInfo:
        """A bound pod from the API: confirms an assumed pod or adds a new one."""
        st = self.pods.get(pod_uid(pod))
        if st is not None and st.assumed and _same_scheduling_spec(st.pod, pod):
            st.pod.pod = pod  # confirmation of what we assumed: keep the parsed view, adopt the object
            st.pod.resource_version = (pod.get("metadata") or {}).get("resourceVersion") or ""
            st.assumed, st.deadline = False, None
            return st.pod
        p = PodInfo(pod)
        if st is not None:
            self._unplace(st.pod)  # the API's object replaces the assumed copy (node may differ)
            self._place(p)
            st.pod, st.assumed, st.deadline = p, False, None
            return p
        self._place(p)
        self.pods[p.uid] = _PodState(p, assumed=False)
        return p

    def update_pod(self, pod: dict[str, Any]) -> PodInfo:
        p = PodInfo(pod)
        st = self.pods.get(p.uid)
        if st is None:
            return self.add_pod(pod)
        self._unplace(st.pod)
        self._place(p)
        st.pod, st.assumed = p, False
        return p

    def remove_pod(self, pod: dict[str, Any]) -> PodInfo | None:
        st = self.pods.pop(pod_uid(pod), None)
        if st is None:
            return None
        self._unplace(st.pod)
        return st.pod

    def get_pod(self, uid: str) -> PodInfo | None:
        st = self.pods.get(uid)
        return st.pod if st else None

    def cleanup_expired_assumed(self) -> list[PodInfo]:
        now = self.clock.monotonic()
        gone = []
        for uid, st in list(self.pods.items()):
            if st.assumed and st.binding_finished and st.deadline is not None and now > st.deadline:
                log.warning("assumed pod %s expired", st.pod.key)
                self._unplace(st.pod)
                del self.pods[uid]
                gone.append(st.pod)
        return gone

    # -- snapshot ------------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        s = self._snapshot
        if self._nodes_changed:
            s.nodes = [ni for ni in self.nodes.values() if ni.node]
            s.num_nodes = len(s.nodes)
            self._nodes_changed = False
        return s


def _same_scheduling_spec(p: PodInfo, pod: dict[str, Any]) -> bool:
    """The API object is the one we assumed: same node, same spec apart from nodeName, same labels."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName") != p.node_name:
        return False
    old = p.pod.get("spec") or {}
    if old is spec:
        return True
    for k in ("containers", "initContainers", "overhead", "affinity", "tolerations",
              "topologySpreadConstraints"):
        if old.get(k) != spec.get(k):
            return False
    return (p.pod.get("metadata") or {}).get("labels") == (pod.get("metadata") or {}).get("labels") and \
        bool((pod.get("metadata") or {}).get("deletionTimestamp")) == p.deleting

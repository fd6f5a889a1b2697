"""PodInfo and NodeInfo: the parsed, precomputed views every plugin reads.

A pod dict is parsed once (requests, ports, tolerations, affinity terms) when it enters the
queue or the cache; a NodeInfo keeps running aggregates (requested cpu/memory/..., used host
ports, pods with affinity) updated incrementally on add/remove, so filters and scores do
integer comparisons instead of walking pod specs.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from nodeagent.api import quantity
from nodeagent.api.selectors import Selector, from_label_selector

CPU, MEMORY, EPHEMERAL, PODS = "cpu", "memory", "ephemeral-storage", "pods"
DEFAULT_MILLI_CPU = 100  # kube-scheduler's non-zero defaults for scoring pods that request nothing
DEFAULT_MEMORY = 200 * 1024 * 1024
HOSTNAME_LABEL = "kubernetes.io/hostname"


@functools.lru_cache(maxsize=4096)
def _milli(v: str) -> int:
    return quantity.milli_value(v)


@functools.lru_cache(maxsize=4096)
def _int(v: str) -> int:
    return quantity.int_value(v)


def resource_value(name: str, v: Any) -> int:
    """cpu in millicores, everything else in whole units (bytes, counts)."""
    return _milli(str(v)) if name == CPU else _int(str(v))


def resource_list(rl: Mapping[str, Any] | None) -> dict[str, int]:
    return {k: resource_value(k, v) for k, v in (rl or {}).items()}


def _add_into(acc: dict[str, int], rl: Mapping[str, int]) -> None:
    for k, v in rl.items():
        acc[k] = acc.get(k, 0) + v


def _max_into(acc: dict[str, int], rl: Mapping[str, int]) -> None:
    for k, v in rl.items():
        if v > acc.get(k, 0):
            acc[k] = v


def pod_requests(spec: Mapping[str, Any], non_zero: bool = False) -> dict[str, int]:
    """Effective requests as Kubernetes computes them: max(sum(app + sidecars), max(init + sidecars
    started before it)) + overhead. With `non_zero`, cpu/memory missing from a container count as
    100m/200Mi (the scoring defaults)."""

    def req(c: Mapping[str, Any]) -> dict[str, int]:
        r = resource_list((c.get("resources") or {}).get("requests"))
        if not r:  # requests default to limits when only limits are set
            r = resource_list((c.get("resources") or {}).get("limits"))
        if non_zero:
            r.setdefault(CPU, DEFAULT_MILLI_CPU)
            r.setdefault(MEMORY, DEFAULT_MEMORY)
        return r

    total: dict[str, int] = {}
    for c in spec.get("containers") or ():
        _add_into(total, req(c))
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for c in spec.get("initContainers") or ():
        r = req(c)
        if c.get("restartPolicy") == "Always":
            _add_into(sidecars, r)
            _max_into(init_max, sidecars)
        else:
            tmp = dict(sidecars)
            _add_into(tmp, r)
            _max_into(init_max, tmp)
    _add_into(total, sidecars)
    _max_into(total, init_max)
    _add_into(total, resource_list(spec.get("overhead")))
    return total


def pod_uid(pod: Mapping[str, Any]) -> str:
    """The key PodInfo uses, without parsing the pod."""
    meta = pod.get("metadata") or {}
    return meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


_TERM_IDS: dict[tuple[Any, ...], int] = {}
_term_seq = itertools.count()


def _term_id(sig: tuple[Any, ...]) -> int:
    """Equal terms (same namespaces and selectors) share an id, so matches can be memoized per cycle."""
    global _TERM_IDS
    tid = _TERM_IDS.get(sig)
    if tid is None:
        if len(_TERM_IDS) > 65536:  # bounded: older terms keep unique ids, they just stop sharing
            _TERM_IDS = {}
        tid = _TERM_IDS[sig] = next(_term_seq)
    return tid


class AffinityTerm:
    """A parsed PodAffinityTerm: which pods (namespaces + selector) and over which topology key."""

    __slots__ = ("namespaces", "ns_selector", "selector", "topology_key", "weight", "id")

    def __init__(self, term: Mapping[str, Any], pod_namespace: str, weight: int = 0):
        self.selector: Selector = from_label_selector(term.get("labelSelector"))
        self.topology_key: str = term.get("topologyKey") or ""
        nss = term.get("namespaces") or ()
        nsel = term.get("namespaceSelector")
        self.ns_selector: Selector | None = from_label_selector(nsel) if nsel is not None else None
        if not nss and nsel is None:
            nss = (pod_namespace,)
        self.namespaces = frozenset(nss)
        self.weight = weight
        self.id = _term_id((self.namespaces, self.ns_selector, self.selector))

    def matches(self, pod: PodInfo, ns_labels: Mapping[str, Mapping[str, str]] | None = None) -> bool:
        if pod.namespace not in self.namespaces:
            if self.ns_selector is None:
                return False
            if not self.ns_selector.matches((ns_labels or {}).get(pod.namespace, {})):
                return False
        return self.selector.matches(pod.labels)


class PodInfo:
    """One pod, parsed once: identity, priority, requests, ports, tolerations, affinity, images."""

    __slots__ = ("pod", "key", "uid", "name", "namespace", "labels", "node_name", "priority", "deleting",
                 "start_time", "req_cpu", "req_mem", "req_eph", "req_scalar", "nz_cpu", "nz_mem",
                 "host_ports", "tolerations", "node_selector", "required_node_terms", "preferred_node_terms",
                 "required_affinity", "required_anti_affinity", "preferred_affinity",
                 "preferred_anti_affinity", "spread_constraints", "images", "preemption_policy",
                 "nominated_node_name", "scheduling_gates", "scheduler_name", "resource_version",
                 "any_affinity", "scoring_affinity", "match_key")

    def __init__(self, pod: dict[str, Any]):
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        self.pod = pod
        self.name: str = meta.get("name") or ""
        self.namespace: str = meta.get("namespace") or "default"
        self.key = f"{self.namespace}/{self.name}"
        self.uid: str = meta.get("uid") or self.key
        self.resource_version: str = meta.get("resourceVersion") or ""
        self.labels: dict[str, str] = meta.get("labels") or {}
        # what selectors and namespaces look at: equal keys match the same terms
        self.match_key = (self.namespace, frozenset(self.labels.items()))
        self.node_name: str = spec.get("nodeName") or ""
        self.priority: int = int(spec.get("priority") or 0)
        self.deleting = bool(meta.get("deletionTimestamp"))
        self.start_time: str = status.get("startTime") or meta.get("creationTimestamp") or ""
        self.scheduler_name: str = spec.get("schedulerName") or "default-scheduler"
        self.preemption_policy: str = spec.get("preemptionPolicy") or "PreemptLowerPriority"
        self.nominated_node_name: str = status.get("nominatedNodeName") or ""
        self.scheduling_gates = tuple(g.get("name", "") for g in spec.get("schedulingGates") or ())
        req = pod_requests(spec)
        self.req_cpu = req.pop(CPU, 0)
        self.req_mem = req.pop(MEMORY, 0)
        self.req_eph = req.pop(EPHEMERAL, 0)
        self.req_scalar: dict[str, int] = {k: v for k, v in req.items() if v}
        nz = pod_requests(spec, non_zero=True)
        self.nz_cpu, self.nz_mem = nz.get(CPU, 0), nz.get(MEMORY, 0)
        ports = []
        for c in list(spec.get("initContainers") or ()) + list(spec.get("containers") or ()):
            for p in c.get("ports") or ():
                if p.get("hostPort"):
                    ports.append((p.get("protocol") or "TCP", int(p["hostPort"]),
                                  p.get("hostIP") or "0.0.0.0"))
        self.host_ports = tuple(ports)
        self.tolerations: list[dict[str, Any]] = spec.get("tolerations") or []
        self.node_selector: dict[str, str] = spec.get("nodeSelector") or {}
        aff = spec.get("affinity") or {}
        na = aff.get("nodeAffinity") or {}
        req_na = na.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        self.required_node_terms = tuple(req_na.get("nodeSelectorTerms") or ()) if req_na else None
        self.preferred_node_terms = tuple(na.get("preferredDuringSchedulingIgnoredDuringExecution") or ())
        pa = aff.get("podAffinity") or {}
        paa = aff.get("podAntiAffinity") or {}
        ns = self.namespace
        self.required_affinity = tuple(AffinityTerm(t, ns) for t in
                                       pa.get("requiredDuringSchedulingIgnoredDuringExecution") or ())
        self.required_anti_affinity = tuple(AffinityTerm(t, ns) for t in
                                            paa.get("requiredDuringSchedulingIgnoredDuringExecution") or ())
        self.preferred_affinity = tuple(
            AffinityTerm(w.get("podAffinityTerm") or {}, ns, int(w.get("weight") or 0))
            for w in pa.get("preferredDuringSchedulingIgnoredDuringExecution") or ())
        self.preferred_anti_affinity = tuple(
            AffinityTerm(w.get("podAffinityTerm") or {}, ns, int(w.get("weight") or 0))
            for w in paa.get("preferredDuringSchedulingIgnoredDuringExecution") or ())
        self.any_affinity = bool(self.required_affinity or self.required_anti_affinity
                                 or self.preferred_affinity or self.preferred_anti_affinity)
        # terms InterPodAffinity's PreScore reads from existing pods (required anti-affinity is not scored)
        self.scoring_affinity = bool(self.required_affinity or self.preferred_affinity
                                     or self.preferred_anti_affinity)
        self.spread_constraints: list[dict[str, Any]] = spec.get("topologySpreadConstraints") or []
        self.images = tuple(normalized_image(c.get("image") or "") for c in spec.get("containers") or ())

    def with_node(self, node_name: str) -> PodInfo:
        """A shallow copy bound to `node_name` (the assumed pod): no deep copy of the spec."""
        clone = object.__new__(PodInfo)
        for s in PodInfo.__slots__:
            object.__setattr__(clone, s, getattr(self, s))
        clone.node_name = node_name
        return clone


def normalized_image(name: str) -> str:
    """Image names as the kubelet reports them: a missing tag means ":latest"."""
    last = name.rsplit("/", 1)[-1]
    if "@" in last or ":" in last:
        return name
    return name + ":latest"


CONDITION_TAINTS = {  # node condition -> (status that taints, taint key): the node lifecycle controller's map
    ("Ready", "False"): "node.kubernetes.io/not-ready",
    ("Ready", "Unknown"): "node.kubernetes.io/unreachable",
    ("MemoryPressure", "True"): "node.kubernetes.io/memory-pressure",
    ("DiskPressure", "True"): "node.kubernetes.io/disk-pressure",
    ("PIDPressure", "True"): "node.kubernetes.io/pid-pressure",
    ("NetworkUnavailable", "True"): "node.kubernetes.io/network-unavailable",
}


def node_taints(node: Mapping[str, Any], from_conditions: bool = True) -> list[dict[str, Any]]:
    """spec.taints, plus NoSchedule taints for bad conditions (as TaintNodesByCondition adds them)
    when no controller has added them yet."""
    taints = list((node.get("spec") or {}).get("taints") or ())
    if from_conditions:
        have = {t.get("key") for t in taints}
        for c in (node.get("status") or {}).get("conditions") or ():
            key = CONDITION_TAINTS.get((c.get("type"), c.get("status")))
            if key and key not in have:
                taints.append({"key": key, "effect": "NoSchedule"})
                have.add(key)
    return taints


class QueuedPodInfo:
    """A pod in the scheduling queue: its attempts, backoff and the plugins that last rejected it."""

    __slots__ = ("pod_info", "timestamp", "attempts", "initial_attempt_timestamp", "unschedulable_plugins",
                 "gated", "backoff_expiry", "sort_key")

    def __init__(self, pod_info: PodInfo, now: float):
        self.pod_info = pod_info
        self.timestamp = now
        self.attempts = 0
        self.initial_attempt_timestamp: float | None = None
        self.unschedulable_plugins: set[str] = set()
        self.gated = False
        self.backoff_expiry = 0.0
        self.sort_key: tuple[Any, ...] = ()

    @property
    def key(self) -> str:
        return self.pod_info.uid


class NodeInfo:
    """One node and the pods on it, with the aggregates filters and scores need."""

    __slots__ = ("node", "name", "labels", "taints", "filter_taints", "prefer_taints", "unschedulable",
                 "alloc_cpu", "alloc_mem", "alloc_eph", "alloc_pods", "alloc_scalar",
                 "req_cpu", "req_mem", "req_eph", "req_scalar", "nz_cpu", "nz_mem",
                 "free_cpu", "free_mem", "free_eph", "free_pods",
                 "pods", "used_ports", "pods_with_affinity", "pods_with_required_anti_affinity",
                 "images", "generation")

    def __init__(self, node: dict[str, Any] | None = None, taints_from_conditions: bool = True):
        self.pods: dict[str, PodInfo] = {}
        self.used_ports: dict[tuple[str, int], list[str]] = {}
        self.pods_with_affinity = 0  # pods with terms that score others (PodInfo.scoring_affinity)
        self.pods_with_required_anti_affinity = 0
        self.req_cpu = self.req_mem = self.req_eph = 0
        self.req_scalar: dict[str, int] = {}
        self.nz_cpu = self.nz_mem = 0
        # allocatable minus requested, and pod slots left: NodeResourcesFit's filter reads these four
        # per node instead of subtracting (new int objects) and counting the pods on each of ~500 nodes
        self.free_cpu = self.free_mem = self.free_eph = self.free_pods = 0
        self.generation = 0
        self.node: dict[str, Any] = {}
        self.name = ""
        self.labels: dict[str, str] = {}
        self.taints: list[dict[str, Any]] = []
        self.filter_taints: tuple[dict[str, Any], ...] = ()
        self.prefer_taints: tuple[dict[str, Any], ...] = ()
        self.unschedulable = False
        self.alloc_cpu = self.alloc_mem = self.alloc_eph = self.alloc_pods = 0
        self.alloc_scalar: dict[str, int] = {}
        self.images: dict[str, int] = {}
        if node is not None:
            self.set_node(node, taints_from_conditions)

    def set_node(self, node: dict[str, Any], taints_from_conditions: bool = True) -> None:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        self.node = node
        self.name = meta.get("name") or ""
        self.labels = meta.get("labels") or {}
        self.taints = node_taints(node, taints_from_conditions)
        self.filter_taints = tuple(t for t in self.taints if t.get("effect") in ("NoSchedule", "NoExecute"))
        self.prefer_taints = tuple(t for t in self.taints if t.get("effect") == "PreferNoSchedule")
        self.unschedulable = bool(spec.get("unschedulable"))
        alloc = resource_list(status.get("allocatable") or status.get("capacity"))
        self.alloc_cpu = alloc.pop(CPU, 0)
        self.alloc_mem = alloc.pop(MEMORY, 0)
        self.alloc_eph = alloc.pop(EPHEMERAL, 0)
        self.alloc_pods = alloc.pop(PODS, 0)
        self.alloc_scalar = alloc
        images: dict[str, int] = {}
        for img in status.get("images") or ():
            for n in img.get("names") or ():
                images[n] = int(img.get("sizeBytes") or 0)
        self.images = images
        self._free()
        self.generation += 1

    def _free(self) -> None:
        """Recompute the free_* aggregates: after every change of allocatable, requests or pod count."""
        self.free_cpu = self.alloc_cpu - self.req_cpu
        self.free_mem = self.alloc_mem - self.req_mem
        self.free_eph = self.alloc_eph - self.req_eph
        self.free_pods = self.alloc_pods - len(self.pods)

    def add_pod(self, p: PodInfo) -> None:
        self.pods[p.uid] = p
        self.req_cpu += p.req_cpu
        self.req_mem += p.req_mem
        self.req_eph += p.req_eph
        if p.req_scalar:
            rs = self.req_scalar
            for k, v in p.req_scalar.items():
                rs[k] = rs.get(k, 0) + v
        self.nz_cpu += p.nz_cpu
        self.nz_mem += p.nz_mem
        if p.host_ports:
            for proto, port, ip in p.host_ports:
                self.used_ports.setdefault((proto, port), []).append(ip)
        if p.any_affinity:
            if p.scoring_affinity:
                self.pods_with_affinity += 1
            if p.required_anti_affinity:
                self.pods_with_required_anti_affinity += 1
        self._free()
        self.generation += 1

    def remove_pod(self, pod: PodInfo) -> bool:
        p = self.pods.pop(pod.uid, None)  # the stored version: its requests are what we added
        if p is None:
            return False
        self.req_cpu -= p.req_cpu
        self.req_mem -= p.req_mem
        self.req_eph -= p.req_eph
        if p.req_scalar:
            rs = self.req_scalar
            for k, v in p.req_scalar.items():
                rs[k] = rs.get(k, 0) - v
        self.nz_cpu -= p.nz_cpu
        self.nz_mem -= p.nz_mem
        if p.host_ports:
            for proto, port, ip in p.host_ports:
                ips = self.used_ports.get((proto, port))
                if ips:
                    ips.remove(ip)
                    if not ips:
                        del self.used_ports[(proto, port)]
        if p.any_affinity:
            if p.scoring_affinity:
                self.pods_with_affinity -= 1
            if p.required_anti_affinity:
                self.pods_with_required_anti_affinity -= 1
        self._free()
        self.generation += 1
        return True

    def clone(self) -> NodeInfo:
        """A copy whose pod set and aggregates can change without touching this one (preemption what-ifs)."""
        c = object.__new__(NodeInfo)
        c.node, c.name, c.labels, c.taints = self.node, self.name, self.labels, self.taints
        c.filter_taints, c.prefer_taints = self.filter_taints, self.prefer_taints
        c.unschedulable = self.unschedulable
        c.alloc_cpu, c.alloc_mem, c.alloc_eph = self.alloc_cpu, self.alloc_mem, self.alloc_eph
        c.alloc_pods = self.alloc_pods
        c.alloc_scalar, c.images, c.generation = self.alloc_scalar, self.images, self.generation
        c.req_cpu, c.req_mem, c.req_eph = self.req_cpu, self.req_mem, self.req_eph
        c.nz_cpu, c.nz_mem = self.nz_cpu, self.nz_mem
        c.free_cpu, c.free_mem, c.free_eph, c.free_pods = self.free_cpu, self.free_mem, self.free_eph, \
            self.free_pods
        c.req_scalar = dict(self.req_scalar)
        c.pods = dict(self.pods)
        c.used_ports = {k: list(v) for k, v in self.used_ports.items()}
        c.pods_with_affinity = self.pods_with_affinity
        c.pods_with_required_anti_affinity = self.pods_with_required_anti_affinity
        return c

    def ports_conflict(self, ports: tuple[tuple[str, int, str], ...]) -> bool:
        used = self.used_ports
        for proto, port, ip in ports:
            ips = used.get((proto, port))
            if ips and (ip == "0.0.0.0" or "0.0.0.0" in ips or ip in ips):
                return True
        return False

    def __repr__(self) -> str:
        return f"NodeInfo({self.name}, pods={len(self.pods)})"


@contextlib.contextmanager
def temporarily(node: NodeInfo, add: Sequence[PodInfo] = (),
                remove: Sequence[PodInfo] = ()) -> Iterator[NodeInfo]:
    """Add/remove pods on a NodeInfo for a what-if and restore it exactly afterwards.

    Cheaper than cloning; safe because scheduling cycles are synchronous, so nothing else reads
    the NodeInfo meanwhile. Pods the body moves itself must be balanced by the body.
    """
    for p in add:
        node.add_pod(p)
    removed = [p for p in remove if node.remove_pod(p)]
    try:
        yield node
    finally:
        for p in removed:
            node.add_pod(p)
        for p in add:
            node.remove_pod(p)

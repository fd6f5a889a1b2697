"""The eviction manager's decisions (kubelet pkg/kubelet/eviction/eviction_manager.go, helpers.go).

`EvictionManager.synchronize(observations, pods, stats)` evaluates thresholds (grace periods, minimum
reclaim), keeps the node conditions (with the pressure transition period), ranks the active pods and
returns at most one victim per call with the kubelet's Evicted message; the caller kills the pod and
publishes `evicted_status`. No I/O: observations and per-pod usage are passed in, the clock is injected.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from nodeagent.api.qos import BEST_EFFORT, pod_qos
from nodeagent.api.quantity import format_quantity, parse_quantity
from nodeagent.api.times import rfc3339
from nodeagent.clock import REAL_CLOCK, Clock
from nodeagent.kubelet.eviction import thresholds as th
from nodeagent.kubelet.eviction.signals import Observations
from nodeagent.kubelet.resources import is_critical_pod, pod_requests

REASON = "Evicted"
PRESSURE_TRANSITION_PERIOD = 300.0  # --eviction-pressure-transition-period default
IMMEDIATE_GRACE_PERIOD = 1  # seconds given to pods evicted for a hard threshold

NODE_LOW_FMT = "The node was low on resource: {}. "
NODE_CONDITION_FMT = "The node had condition: {}. "
THRESHOLD_MET_FMT = "Threshold quantity: {}, available: {}. "
CONTAINER_FMT = "Container {} was using {}, request is {}, has larger consumption of {}. "
EMPTY_DIR_FMT = "Usage of EmptyDir volume {} exceeds the limit {}. "
CONTAINER_EPHEMERAL_FMT = "Container {} exceeded its local ephemeral storage limit {}. "
POD_EPHEMERAL_FMT = "Pod ephemeral local storage usage exceeds the total limit of containers {}. "


@dataclasses.dataclass(frozen=True)
class PodUsage:
    """What the stats provider knows about a pod (summary API PodStats, reduced)."""

    memory: int = 0  # working set bytes
    ephemeral_storage: int = 0  # rootfs + logs + local volumes
    inodes: int = 0
    processes: int = 0
    # container name → {memory, ephemeral-storage}
    containers: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    volumes: Mapping[str, int] = dataclasses.field(default_factory=dict)  # emptyDir name → bytes used


StatsFunc = Callable[[Mapping[str, Any]], "PodUsage | None"]


@dataclasses.dataclass(frozen=True)
class Eviction:
    pod: Mapping[str, Any]
    message: str
    grace_period: int
    annotations: Mapping[str, str]
    threshold: th.Threshold


def threshold_met(t: th.Threshold, observations: Observations, enforce_min_reclaim: bool) -> bool:
    obs = observations.get(t.signal)
    if obs is None:
        return False
    quantity = t.value.resolve(obs.capacity)
    if enforce_min_reclaim and t.min_reclaim is not None:
        quantity += t.min_reclaim.resolve(obs.capacity)
    return quantity > obs.available


def thresholds_met(ts: Iterable[th.Threshold], observations: Observations, enforce_min_reclaim: bool = False
                   ) -> list[th.Threshold]:
    return [t for t in ts if threshold_met(t, observations, enforce_min_reclaim)]


def _merge(a: Iterable[th.Threshold], b: Iterable[th.Threshold]) -> list[th.Threshold]:
    out = list(a)
    for t in b:
        if t not in out:
            out.append(t)
    return out


# -- ranking --------------------------------------------------------------------------------------


def _priority(pod: Mapping[str, Any]) -> int:
    return int((pod.get("spec") or {}).get("priority") or 0)


def _request(pod: Mapping[str, Any], resource: str) -> Fraction:
    return pod_requests(pod).get(resource, Fraction(0))


def _usage(u: PodUsage, resource: str) -> int:
    return {"memory": u.memory, "ephemeral-storage": u.ephemeral_storage, "inodes": u.inodes,
            "pids": u.processes}[resource]


def _cmp(a: Any, b: Any) -> int:
    return (a > b) - (a < b)


@dataclasses.dataclass(frozen=True)
class _RankInfo:
    """What ranking compares, computed once per pod (requests parse quantities: not per comparison)."""

    priority: int
    usage: int | None  # None: no stats for this pod
    request: Fraction
    processes: int | None


def _exceeds(a: _RankInfo, b: _RankInfo) -> int:
    if a.usage is None or b.usage is None:
        return 0
    return _cmp(b.usage > b.request, a.usage > a.request)  # exceeding requests sorts first


def _by_priority(a: _RankInfo, b: _RankInfo) -> int:
    return _cmp(a.priority, b.priority)  # lower priority first


def _above_request(a: _RankInfo, b: _RankInfo) -> int:
    if a.usage is None:
        return 1  # no stats: after the ones we can measure
    if b.usage is None:
        return -1
    return _cmp(b.usage - b.request, a.usage - a.request)  # larger consumption above request first


def _processes(a: _RankInfo, b: _RankInfo) -> int:
    if a.processes is None:
        return 1
    if b.processes is None:
        return -1
    return _cmp(b.processes, a.processes)


def _ordered_by(*cmps):
    def cmp(a, b) -> int:
        for c in cmps:
            r = c(a[1], b[1])
            if r:
                return r
        return 0
    return functools.cmp_to_key(cmp)


def rank_pods(pods: Sequence[Mapping[str, Any]], signal: str, stats: StatsFunc) -> list[Mapping[str, Any]]:
    """Victims first: memory/disk: usage above requests, then priority, then usage above requests;
    pids: priority, then process count."""
    resource = th.SIGNAL_RESOURCE[signal]
    infos = []
    for pod in pods:
        u = stats(pod)
        infos.append((pod, _RankInfo(_priority(pod), None if u is None else _usage(u, resource),
                                     _request(pod, resource) if resource != "pids" else Fraction(0),
                                     None if u is None else u.processes)))
    if resource == "pids":
        key = _ordered_by(_by_priority, _processes)
    else:
        key = _ordered_by(_exceeds, _by_priority, _above_request)
    return [pod for pod, _ in sorted(infos, key=key)]


# -- messages and status -----------------------------------------------------------------------------


def _fmt(value: Fraction | int, resource: str) -> str:
    v = Fraction(value)
    if resource in ("memory", "ephemeral-storage"):
        return format_quantity(v, binary=True)
    return format_quantity(v)


def eviction_message(resource: str, pod: Mapping[str, Any], stats: StatsFunc, met: Sequence[th.Threshold],
                     observations: Observations) -> tuple[str, dict[str, str]]:
    """evictionMessage: the low resource, the threshold and what was available, and each container using
    more than it requested; annotations name the offending containers."""
    msg = NODE_LOW_FMT.format(resource)
    for t in met:
        if t.resource == resource and t.signal in observations:
            obs = observations[t.signal]
            msg += THRESHOLD_MET_FMT.format(_fmt(t.value.resolve(obs.capacity), resource),
                                            _fmt(obs.available, resource))
            break
    names, usages = [], []
    usage = stats(pod)
    if usage is not None:
        for c in (pod.get("spec") or {}).get("containers") or []:
            cu = usage.containers.get(c["name"])
            if cu is None or resource not in cu:
                continue
            req = parse_quantity(((c.get("resources") or {}).get("requests") or {}).get(resource, 0))
            if cu[resource] > req:
                used = _fmt(cu[resource], resource)
                msg += CONTAINER_FMT.format(c["name"], used, _fmt(req, resource), resource)
                names.append(c["name"])
                usages.append(used)
    ann = {"offending_containers": ",".join(names), "offending_containers_usage": ",".join(usages),
           "starved_resource": resource}
    return msg, ann


def evicted_status(pod: Mapping[str, Any], message: str, now: float) -> dict[str, Any]:
    """The status patch an evicted pod gets: Failed, reason Evicted, and the DisruptionTarget condition."""
    status = dict(pod.get("status") or {})
    status["phase"] = "Failed"
    status["reason"] = REASON
    status["message"] = message
    conds = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
    conds.append({"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                  "message": message, "lastProbeTime": None, "lastTransitionTime": rfc3339(now)})
    status["conditions"] = conds
    return status


def local_storage_violation(pod: Mapping[str, Any], usage: PodUsage | None) -> str | None:
    """localStorageEviction: the message when an emptyDir exceeds its sizeLimit, the pod the sum of the
    ephemeral-storage limits its containers declare, or a container its own limit (checked in that order);
    None when within."""
    if usage is None:
        return None
    spec = pod.get("spec") or {}
    for v in spec.get("volumes") or []:
        ed = v.get("emptyDir")
        if ed is None or ed.get("medium") == "Memory" or ed.get("sizeLimit") is None:
            continue
        size_limit = parse_quantity(ed["sizeLimit"])
        used = usage.volumes.get(v["name"])
        if used is not None and size_limit > 0 and used > size_limit:
            return EMPTY_DIR_FMT.format(_go_q(v["name"]), _go_q(_fmt(size_limit, "ephemeral-storage")))
    containers = list(spec.get("containers") or [])
    limits = [((c.get("resources") or {}).get("limits") or {}).get("ephemeral-storage") for c in containers]
    given = [x for x in limits if x is not None]
    if given:  # PodLimits: the sum of the limits the containers declare
        total = sum((parse_quantity(x) for x in given), Fraction(0))
        if usage.ephemeral_storage > total:
            return POD_EPHEMERAL_FMT.format(_fmt(total, "ephemeral-storage"))
    for c, limit in zip(containers, limits, strict=True):
        if limit is None:
            continue
        used = (usage.containers.get(c["name"]) or {}).get("ephemeral-storage")
        if used is not None and used > parse_quantity(limit):
            return CONTAINER_EPHEMERAL_FMT.format(c["name"],
                                                  _go_q(_fmt(parse_quantity(limit), "ephemeral-storage")))
    return None


def _go_q(s: str) -> str:
    """Go's %q for the ASCII names and quantities these messages carry."""
    return json.dumps(s)


# -- the manager -----------------------------------------------------------------------------------


class EvictionManager:
    def __init__(self, thresholds: Sequence[th.Threshold], clock: Clock | None = None,
                 pressure_transition_period: float = PRESSURE_TRANSITION_PERIOD,
                 max_pod_grace_period: int = 0) -> None:
        self.thresholds = list(thresholds)
        self.clock = clock or REAL_CLOCK
        self.pressure_transition_period = pressure_transition_period
        self.max_pod_grace_period = max_pod_grace_period
        self.first_observed: dict[th.Threshold, float] = {}
        self.condition_last_observed: dict[str, float] = {}
        self.thresholds_met: list[th.Threshold] = []
        self.node_conditions: list[str] = []

    def evaluate(self, observations: Observations) -> list[th.Threshold]:
        """Update conditions and grace tracking; returns the thresholds met for long enough to act on."""
        now = self.clock.now()
        met = thresholds_met(self.thresholds, observations)
        if self.thresholds_met:
            # Thresholds that fired stay active until the minimum reclaim above them is available again.
            met = _merge(met, thresholds_met(self.thresholds_met, observations, enforce_min_reclaim=True))
        self.first_observed = {t: self.first_observed.get(t, now) for t in met}
        for cond in dict.fromkeys(t.condition for t in met):
            self.condition_last_observed[cond] = now
        self.condition_last_observed = {c: t for c, t in self.condition_last_observed.items()
                                        if now - t < self.pressure_transition_period}
        self.node_conditions = [c for c in ("MemoryPressure", "DiskPressure", "PIDPressure")
                                if c in self.condition_last_observed]
        ready = [t for t in met if now - self.first_observed[t] >= t.grace_period]
        self.thresholds_met = ready
        return ready

    def synchronize(self, observations: Observations, active_pods: Sequence[Mapping[str, Any]],
                    stats: StatsFunc) -> Eviction | None:
        """One eviction-manager pass: at most one victim (the caller kills it and waits for cleanup)."""
        return self.choose(self.evaluate(observations), observations, active_pods, stats)

    @staticmethod
    def target(met: Sequence[th.Threshold]) -> th.Threshold:
        """The threshold acted on first: memory before the others."""
        return sorted(met, key=lambda t: 0 if t.resource == "memory" else 1)[0]

    def choose(self, met: Sequence[th.Threshold], observations: Observations,
               active_pods: Sequence[Mapping[str, Any]], stats: StatsFunc) -> Eviction | None:
        """The victim for the thresholds `evaluate` returned (ranked for the first one's resource)."""
        if not met:
            return None
        met = sorted(met, key=lambda t: 0 if t.resource == "memory" else 1)
        target = met[0]
        for pod in rank_pods(active_pods, target.signal, stats):
            if is_critical_pod(pod):
                continue  # kubelet: "cannot evict a critical pod"
            if target.is_hard():
                grace = IMMEDIATE_GRACE_PERIOD
            else:
                grace = int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
                if self.max_pod_grace_period > 0:
                    grace = min(grace, self.max_pod_grace_period)
            msg, ann = eviction_message(target.resource, pod, stats, met, observations)
            return Eviction(pod, msg, grace, ann, target)
        return None

    def local_storage_evictions(self, active_pods: Sequence[Mapping[str, Any]],
                                stats: StatsFunc) -> list[Eviction]:
        """Pods over their own ephemeral-storage limits, evicted regardless of node pressure (grace 0)."""
        out = []
        for pod in active_pods:
            if is_critical_pod(pod):
                continue
            msg = local_storage_violation(pod, stats(pod))
            if msg is not None:
                out.append(Eviction(pod, msg, 0, {},
                                    th.Threshold(th.NODEFS_AVAILABLE, th.Value(quantity=Fraction(0)))))
        return out

    def admit(self, pod: Mapping[str, Any]) -> str | None:
        """Admit (eviction_manager.go): under memory pressure alone only BestEffort pods are refused (unless
        they tolerate the memory-pressure taint); under any other pressure every pod; critical pods always
        pass. Returns the message of the Evicted rejection, None to admit."""
        conds = list(self.node_conditions)
        if not conds or is_critical_pod(pod):
            return None
        if conds == ["MemoryPressure"]:
            if pod_qos(pod) != BEST_EFFORT or _tolerates((pod.get("spec") or {}).get("tolerations") or [],
                                                                  th.CONDITION_TAINT["MemoryPressure"]):
                return None
        return NODE_CONDITION_FMT.format("[" + " ".join(conds) + "]")

    def conditions(self) -> dict[str, bool]:
        return {c: c in self.node_conditions for c in ("MemoryPressure", "DiskPressure", "PIDPressure")}

    def node_conditions_status(self, old: Iterable[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
        """The three pressure conditions as Node status entries (heartbeat now, transition kept if
        unchanged)."""
        now = rfc3339(self.clock.now())
        text = {"MemoryPressure": ("KubeletHasInsufficientMemory",
                                   "kubelet has insufficient memory available",
                                   "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                "DiskPressure": ("KubeletHasDiskPressure", "kubelet has disk pressure",
                                 "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                "PIDPressure": ("KubeletHasInsufficientPID", "kubelet has insufficient PID available",
                                "KubeletHasSufficientPID", "kubelet has sufficient PID available")}
        prev = {c.get("type"): c for c in old}
        out = []
        for cond, on in self.conditions().items():
            r_on, m_on, r_off, m_off = text[cond]
            status = "True" if on else "False"
            p = prev.get(cond)
            kept = p.get("lastTransitionTime") if p and p.get("status") == status else None
            trans = kept or now
            out.append({"type": cond, "status": status, "reason": r_on if on else r_off,
                        "message": m_on if on else m_off, "lastHeartbeatTime": now,
                        "lastTransitionTime": trans})
        return out

    def taints(self) -> list[dict[str, str]]:
        """NoSchedule taints for the pressure conditions (TaintNodesByCondition)."""
        return [{"key": th.CONDITION_TAINT[c], "effect": "NoSchedule"} for c in self.node_conditions]


def _tolerates(tolerations: Iterable[Mapping[str, Any]], key: str) -> bool:
    for t in tolerations:
        if t.get("effect") not in (None, "", "NoSchedule"):
            continue
        if t.get("operator") == "Exists" and not t.get("key"):
            return True
        if t.get("key") == key and t.get("operator", "Equal") in ("Exists", "Equal"):
            return True
    return False

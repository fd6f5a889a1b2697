"""The DaemonSet controller's decisions: which nodes run a daemon pod, what to create, delete and roll.

Pure functions (pkg/controller/daemon). A node is eligible when the pod's
nodeSelector and required node affinity match it and it has no untolerated
NoSchedule/NoExecute taint (counting the default DaemonSet tolerations); a pod
keeps running while no untolerated NoExecute taint appears. Pods are pinned to
their node with a required nodeAffinity matchFields term on metadata.name, so the
scheduler places them. A RollingUpdate deletes old-template pods while at most
maxUnavailable nodes lack an available pod.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.api import taints as t
from nodeagent.api.objects import Obj, ObjT
from nodeagent.api.selectors import node_matches_selector_terms
from nodeagent.controllers import podutil
from nodeagent.controllers.deployment import scaled_value, template_hash

HASH_LABEL = "controller-revision-hash"
GENERATION_LABEL = "pod-template-generation"

DEFAULT_TOLERATIONS = (
    {"key": t.NOT_READY, "operator": "Exists", "effect": "NoExecute"},
    {"key": t.UNREACHABLE, "operator": "Exists", "effect": "NoExecute"},
    {"key": t.DISK_PRESSURE, "operator": "Exists", "effect": "NoSchedule"},
    {"key": t.MEMORY_PRESSURE, "operator": "Exists", "effect": "NoSchedule"},
    {"key": t.PID_PRESSURE, "operator": "Exists", "effect": "NoSchedule"},
    {"key": t.UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"},
    {"key": t.NETWORK_UNAVAILABLE, "operator": "Exists", "effect": "NoSchedule"},
)


def with_default_tolerations(tolerations: Iterable[Mapping[str, Any]]) -> list[dict]:
    out = [dict(x) for x in tolerations]
    for d in DEFAULT_TOLERATIONS:
        if not any(x.get("key") == d["key"] and x.get("effect") == d["effect"] for x in out):
            out.append(dict(d))
    return out


def _tspec(ds: Mapping[str, Any]) -> dict:
    return ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}


def revision_hash(ds: Mapping[str, Any]) -> str:
    return template_hash((ds.get("spec") or {}).get("template") or {})


def node_should_run(ds: Mapping[str, Any], node: Mapping[str, Any]) -> tuple[bool, bool]:
    """(should run a new pod here, may an existing pod keep running) — NodeShouldRunDaemonPod."""
    spec = _tspec(ds)
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False, False
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution")) or {}).get("nodeSelectorTerms")
    if terms and not node_matches_selector_terms(node, terms):
        return False, False
    tols = with_default_tolerations(spec.get("tolerations") or [])
    taints = (node.get("spec") or {}).get("taints") or []
    if t.first_untolerated(taints, tols, ("NoExecute",)):
        return False, False
    if t.first_untolerated(taints, tols, ("NoSchedule",)):
        return False, True
    return True, True


def pod_for_node(ds: Mapping[str, Any], node_name: str, revision: str) -> dict:
    """A daemon pod pinned to `node_name` through nodeAffinity matchFields (the scheduler binds it)."""
    template = copy.deepcopy((ds.get("spec") or {}).get("template") or {})
    meta = ds["metadata"]
    pod = podutil.pod_from_template(template, ds, meta.get("namespace", "default"), meta["name"],
                                    {HASH_LABEL: revision,
                                     GENERATION_LABEL: str(meta.get("generation", 1))})
    spec = pod["spec"]
    spec["tolerations"] = with_default_tolerations(spec.get("tolerations") or [])
    affinity = spec.setdefault("affinity", {})
    na = affinity.setdefault("nodeAffinity", {})
    na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
    return pod


def pod_node(pod: Mapping[str, Any]) -> str | None:
    """The node a daemon pod is for: its nodeName, else the name its affinity pins."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return spec["nodeName"]
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution")) or {}).get("nodeSelectorTerms") or []
    for term in terms:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In" \
                    and len(f.get("values") or []) == 1:
                return f["values"][0]
    return None


@dataclasses.dataclass
class Plan:
    create: list[str] = dataclasses.field(default_factory=list)  # node names
    delete: list[Obj] = dataclasses.field(default_factory=list)
    status: dict[str, Any] = dataclasses.field(default_factory=dict)


def _newest_first_oldest_kept(pods: list[ObjT]) -> list[ObjT]:
    return sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")


def plan(ds: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]], pods: Iterable[Obj],
         now: dt.datetime) -> Plan:
    """manage + rollingUpdate + status for one DaemonSet over its owned pods."""
    spec = ds.get("spec") or {}
    min_ready = int(spec.get("minReadySeconds") or 0)
    rev = revision_hash(ds)
    by_node: dict[str, list[Obj]] = {}
    for p in pods:
        if not podutil.is_terminating(p):
            by_node.setdefault(pod_node(p) or "", []).append(p)
    out = Plan()
    desired = scheduled = misscheduled = ready = available = updated = 0
    wanted_nodes: list[str] = []
    for node in nodes:
        name = node["metadata"]["name"]
        run, keep = node_should_run(ds, node)
        here = by_node.pop(name, [])
        if run:
            desired += 1
            wanted_nodes.append(name)
        if (run or keep) and here:
            failed = [p for p in here if (p.get("status") or {}).get("phase") == "Failed"]
            alive = _newest_first_oldest_kept([p for p in here if p not in failed])
            out.delete += failed
            out.delete += alive[1:]  # duplicates: keep the oldest
            if alive:
                scheduled += 1
                p = alive[0]
                ready += podutil.is_pod_ready(p)
                available += podutil.is_pod_available(p, min_ready, now)
                updated += ((p.get("metadata") or {}).get("labels") or {}).get(HASH_LABEL) == rev
            elif run:
                out.create.append(name)
        elif run:
            out.create.append(name)
        elif here:
            misscheduled += 1
            out.delete += here
    for leftovers in by_node.values():  # pods for nodes that are gone
        out.delete += leftovers
    if not out.create and not podutil.is_terminating(ds):
        out.delete += _rolling_victims(ds, rev, wanted_nodes, pods, now, out.delete)
    out.status = {
        "observedGeneration": ds["metadata"].get("generation", 1),
        "desiredNumberScheduled": desired, "currentNumberScheduled": scheduled,
        "numberMisscheduled": misscheduled, "numberReady": ready, "numberAvailable": available,
        "updatedNumberScheduled": updated, "numberUnavailable": max(desired - available, 0),
    }
    return out


def _rolling_victims(ds: Mapping[str, Any], rev: str, wanted: list[str], pods: Iterable[Obj],
                     now: dt.datetime, already: list[Obj]) -> list[Obj]:
    """rollingUpdate (maxSurge 0): delete old pods while at most maxUnavailable nodes are unavailable."""
    strategy = (ds.get("spec") or {}).get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return []
    min_ready = int((ds.get("spec") or {}).get("minReadySeconds") or 0)
    max_unavailable = scaled_value((strategy.get("rollingUpdate") or {}).get("maxUnavailable", 1),
                                   len(wanted), True)
    max_unavailable = max(max_unavailable, 1) if wanted else 0
    gone = {id(p) for p in already}
    current: dict[str, Obj] = {}
    for p in _newest_first_oldest_kept([p for p in pods if id(p) not in gone]):
        n = pod_node(p)
        if n in wanted and n not in current:
            current[n] = p
    unavailable = 0
    old_unavailable: list[Obj] = []
    old_available: list[Obj] = []
    for n in wanted:
        pod = current.get(n)
        if pod is None or podutil.is_terminating(pod):
            unavailable += 1
            continue
        old = ((pod.get("metadata") or {}).get("labels") or {}).get(HASH_LABEL) != rev
        ok = podutil.is_pod_available(pod, min_ready, now)
        if not ok:
            unavailable += 1
        if old:
            (old_available if ok else old_unavailable).append(pod)
    victims = list(old_unavailable)  # already unavailable: replacing them costs nothing
    budget = max_unavailable - unavailable
    for p in old_available:
        if budget <= 0:
            break
        victims.append(p)
        budget -= 1
    return victims

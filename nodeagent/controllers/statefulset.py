"""The StatefulSet controller's decisions: ordinals, ordered create/delete, partitioned rolling update.

Pure functions (pkg/controller/statefulset, one step per sync like the seed's
OrderedReady): pods are named <set>-<ordinal> with hostname = pod name and
subdomain = serviceName; with OrderedReady, ordinal N is created only when
0..N-1 are Running and Ready, and scale-down removes the highest ordinal first,
one at a time; Parallel does all at once. RollingUpdate replaces pods whose
revision differs, highest ordinal first, only for ordinals >= partition.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.controllers import podutil
from nodeagent.controllers.deployment import template_hash

REVISION_LABEL = "controller-revision-hash"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"


def revision(sts: Mapping[str, Any]) -> str:
    return f"{sts['metadata']['name']}-{template_hash((sts.get('spec') or {}).get('template') or {})}"


def ordinal(sts_name: str, pod: Mapping[str, Any]) -> int | None:
    m = re.fullmatch(re.escape(sts_name) + r"-(\d+)", (pod.get("metadata") or {}).get("name", ""))
    return int(m.group(1)) if m else None


def pod_for_ordinal(sts: Mapping[str, Any], i: int, rev: str) -> dict:
    meta, spec = sts["metadata"], sts.get("spec") or {}
    name = f"{meta['name']}-{i}"
    pod = podutil.pod_from_template(copy.deepcopy(spec.get("template") or {}), sts,
                                    meta.get("namespace", "default"), meta["name"],
                                    {REVISION_LABEL: rev, POD_NAME_LABEL: name,
                                                   POD_INDEX_LABEL: str(i)})
    pod["metadata"].pop("generateName", None)
    pod["metadata"]["name"] = name
    pod["spec"]["hostname"] = name
    if spec.get("serviceName"):
        pod["spec"]["subdomain"] = spec["serviceName"]
    claims = {c["metadata"]["name"]: claim_name(sts, c, i) for c in spec.get("volumeClaimTemplates") or []}
    if claims:  # updateStorage: each template's volume points at this ordinal's own claim
        vols = [v for v in pod["spec"].get("volumes") or [] if v.get("name") not in claims]
        vols += [{"name": t, "persistentVolumeClaim": {"claimName": c}} for t, c in claims.items()]
        pod["spec"]["volumes"] = vols
    return pod


def claim_name(sts: Mapping[str, Any], template: Mapping[str, Any], i: int) -> str:
    """<template>-<set>-<ordinal>: the claim that follows an ordinal across pod re-creations."""
    return f"{template['metadata']['name']}-{sts['metadata']['name']}-{i}"


def claims_for(sts: Mapping[str, Any], i: int) -> list[dict]:
    """The PersistentVolumeClaims ordinal `i` needs (created before its pod, never deleted with it)."""
    spec = sts.get("spec") or {}
    labels = dict(((spec.get("selector") or {}).get("matchLabels")) or {})
    out = []
    for t in spec.get("volumeClaimTemplates") or []:
        tmeta = t.get("metadata") or {}
        out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": claim_name(sts, t, i), "namespace": sts["metadata"].get("namespace"),
                                 "labels": {**(tmeta.get("labels") or {}), **labels}},
                    "spec": copy.deepcopy(t.get("spec") or {})})
    return out


def retention(sts: Mapping[str, Any]) -> tuple[str, str]:
    """(whenDeleted, whenScaled) of persistentVolumeClaimRetentionPolicy; unknown values count as Retain."""
    p = (sts.get("spec") or {}).get("persistentVolumeClaimRetentionPolicy") or {}
    def norm(v: Any) -> str:
        return "Delete" if v == "Delete" else "Retain"
    return norm(p.get("whenDeleted")), norm(p.get("whenScaled"))


def _owner_ref(obj: Mapping[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    m = obj.get("metadata") or {}
    return {"apiVersion": api_version, "kind": kind, "name": m.get("name"), "uid": m.get("uid")}


def claim_owner_refs(sts: Mapping[str, Any], claim: Mapping[str, Any], pod: Mapping[str, Any] | None,
                     replicas: int | None = None) -> list[dict[str, Any]]:
    """The claim's ownerReferences under the retention policy (updateClaimOwnerRefForSetAndPod): owned by
    the set when whenDeleted is Delete, by its condemned pod when whenScaled is Delete and the ordinal is
    beyond the replicas; others' references are kept. The garbage collector does the deleting."""
    when_deleted, when_scaled = retention(sts)
    name = sts["metadata"]["name"]
    n = int((sts.get("spec") or {}).get("replicas", 1)) if replicas is None else replicas
    i = ordinal(name, pod) if pod is not None else None
    scaled_down = i is not None and i >= n
    set_uid = (sts.get("metadata") or {}).get("uid")
    pod_uid = ((pod or {}).get("metadata") or {}).get("uid")
    refs = [r for r in (claim.get("metadata") or {}).get("ownerReferences") or []
            if r.get("uid") not in (set_uid, pod_uid)]
    if when_deleted == "Delete" and not (when_scaled == "Delete" and scaled_down):
        refs.append(_owner_ref(sts, "apps/v1", "StatefulSet"))
    if when_scaled == "Delete" and scaled_down and pod is not None:
        refs.append(_owner_ref(pod, "v1", "Pod"))
    return refs


def _running_ready(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and podutil.is_pod_ready(pod)


def _rev(pod: Mapping[str, Any]) -> str:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL, "")


@dataclasses.dataclass
class Plan:
    create: list[int] = dataclasses.field(default_factory=list)
    delete: list[Mapping[str, Any]] = dataclasses.field(default_factory=list)
    status: dict = dataclasses.field(default_factory=dict)


def plan(sts: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> Plan:
    spec = sts.get("spec") or {}
    name = sts["metadata"]["name"]
    replicas = int(spec.get("replicas", 1))
    parallel = spec.get("podManagementPolicy") == "Parallel"
    strategy = spec.get("updateStrategy") or {}
    partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
    rev = revision(sts)
    current_rev = (sts.get("status") or {}).get("currentRevision") or rev
    by_ord: dict[int, Mapping[str, Any]] = {}
    for p in pods:
        i = ordinal(name, p)
        if i is not None:
            by_ord[i] = p
    out = Plan()
    out.status = _status(sts, by_ord, replicas, rev, current_rev, partition)
    if podutil.is_terminating(sts):
        return out

    # ordinals in range: (re)create missing and failed pods in order
    for i in range(replicas):
        pod = by_ord.get(i)
        if pod is None:
            out.create.append(i)
            if not parallel:
                return out
            continue
        if (pod.get("status") or {}).get("phase") == "Failed" and not podutil.is_terminating(pod):
            out.delete.append(pod)
            if not parallel:
                return out
            continue
        if not parallel and (podutil.is_terminating(pod) or not _running_ready(pod)):
            return out  # wait for this one before touching the next
    if out.create or out.delete:
        return out

    # condemned ordinals: highest first, one at a time when ordered
    condemned = sorted((i for i in by_ord if i >= replicas), reverse=True)
    for i in condemned:
        p = by_ord[i]
        if podutil.is_terminating(p):
            if not parallel:
                return out
            continue
        out.delete.append(p)
        if not parallel:
            return out
    if out.delete:
        return out

    # rolling update: the highest ordinal >= partition not at the update revision, when all are healthy
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return out
    if any(podutil.is_terminating(by_ord[i]) or not _running_ready(by_ord[i]) for i in range(replicas)):
        return out
    for i in range(replicas - 1, partition - 1, -1):
        if _rev(by_ord[i]) != rev:
            out.delete.append(by_ord[i])
            return out
    return out


def _status(sts: Mapping[str, Any], by_ord: Mapping[int, Mapping[str, Any]], replicas: int, rev: str,
            current_rev: str, partition: int) -> dict:
    live = [p for p in by_ord.values() if not podutil.is_terminating(p)]
    updated = sum(1 for p in live if _rev(p) == rev)
    current = sum(1 for p in live if _rev(p) == current_rev)
    ready = sum(1 for p in live if _running_ready(p))
    # every replica at the update revision and ready: the rollout is done, the update becomes current
    if updated == replicas and ready == replicas and len(live) == replicas:
        current_rev, current = rev, updated
    return {
        "observedGeneration": sts["metadata"].get("generation", 1),
        "replicas": len(live), "readyReplicas": ready, "availableReplicas": ready,
        "currentReplicas": current, "updatedReplicas": updated,
        "currentRevision": current_rev, "updateRevision": rev,
    }

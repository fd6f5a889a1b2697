"""What a pod refers to by name: the Secrets, ConfigMaps, claims and ServiceAccount its kubelet reads
(kube's VisitPodSecretNames/VisitPodConfigmapNames and the Node authorizer's graph edges), so the kubelet
watches exactly these and the Node authorizer lets a node read exactly these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PV_SECRET_REFS = ("nodePublishSecretRef", "nodeStageSecretRef", "nodeExpandSecretRef")


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or []),
            *(spec.get("ephemeralContainers") or [])]


def _volume_sources(pod: Mapping[str, Any], kind: str, field: str) -> set[str]:
    """Names of `kind` sources of the pod's volumes, direct or projected."""
    names: set[str] = set()
    for v in (pod.get("spec") or {}).get("volumes") or []:
        names.add((v.get(kind) or {}).get(field, ""))
        for src in (v.get("projected") or {}).get("sources") or []:
            names.add((src.get(kind) or {}).get("name", ""))
    return names


def secret_names(pod: Mapping[str, Any]) -> set[str]:
    """The Secrets a pod reads: environment, image pulls, volumes and inline CSI volumes' secrets."""
    spec = pod.get("spec") or {}
    names = {r.get("name", "") for r in spec.get("imagePullSecrets") or []}
    names |= _volume_sources(pod, "secret", "secretName")
    names |= {((v.get("csi") or {}).get("nodePublishSecretRef") or {}).get("name", "")
              for v in spec.get("volumes") or []}
    for c in _containers(pod):
        names |= {(s.get("secretRef") or {}).get("name", "") for s in c.get("envFrom") or []}
        names |= {((e.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name", "")
                  for e in c.get("env") or []}
    return {n for n in names if n}


def configmap_names(pod: Mapping[str, Any]) -> set[str]:
    """The ConfigMaps a pod's environment and volumes read."""
    names = _volume_sources(pod, "configMap", "name")
    for c in _containers(pod):
        names |= {(s.get("configMapRef") or {}).get("name", "") for s in c.get("envFrom") or []}
        names |= {((e.get("valueFrom") or {}).get("configMapKeyRef") or {}).get("name", "")
                  for e in c.get("env") or []}
    return {n for n in names if n}


def claim_names(pod: Mapping[str, Any]) -> set[str]:
    """The PersistentVolumeClaims a pod mounts: named ones, its generic ephemeral volumes' (<pod>-<vol>)."""
    pod_name = (pod.get("metadata") or {}).get("name", "")
    names: set[str] = set()
    for v in (pod.get("spec") or {}).get("volumes") or []:
        names.add((v.get("persistentVolumeClaim") or {}).get("claimName", ""))
        if v.get("ephemeral") and v.get("name"):
            names.add(f"{pod_name}-{v['name']}")
    return {n for n in names if n}


def resource_claim_names(pod: Mapping[str, Any]) -> set[str]:
    """The ResourceClaims a pod's claims resolved to (spec.resourceClaims by name, or the generated ones in
    status.resourceClaimStatuses)."""
    names = {c.get("resourceClaimName", "") for c in (pod.get("spec") or {}).get("resourceClaims") or []}
    names |= {s.get("resourceClaimName", "") for s in (pod.get("status") or {}).get("resourceClaimStatuses")
              or []}
    return {n for n in names if n}


def service_account_name(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


def volume_secret_refs(pv: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(namespace, name) of the Secrets a PersistentVolume's CSI source names for its node's operations."""
    csi = (pv.get("spec") or {}).get("csi") or {}
    out = set()
    for field in PV_SECRET_REFS:
        ref = csi.get(field) or {}
        if ref.get("name"):
            out.add((str(ref.get("namespace") or ""), str(ref["name"])))
    return out

"""Generic ephemeral volumes (`volumes[].ephemeral`): the claim `<pod>-<volume>` the ephemeral controller
makes from the volume's claim template, owned by the pod (k8s.io/component-helpers/storage/ephemeral)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.kubelet.volumes.payloads import VolumeSourceError


def claim_name(pod: Mapping[str, Any], volume: Mapping[str, Any]) -> str:
    return f"{(pod.get('metadata') or {}).get('name', '')}-{volume.get('name', '')}"


def check_owner(pod: Mapping[str, Any], pvc: Mapping[str, Any]) -> None:
    """VolumeIsForPod: the claim's controller owner is this pod, else the pod must not use it."""
    uid = (pod.get("metadata") or {}).get("uid")
    owners = (pvc.get("metadata") or {}).get("ownerReferences") or []
    if not any(o.get("uid") == uid and o.get("controller") for o in owners):
        m, pm = pvc.get("metadata") or {}, pod.get("metadata") or {}
        raise VolumeSourceError(f"PVC {m.get('namespace')}/{m.get('name')} was not created for pod "
                                f"{pm.get('namespace')}/{pm.get('name')} (pod is not owner)")

"""A pod's `persistentVolumeClaim` volume: claim → bound PersistentVolume → what to mount.

The kubelet's desired-state populator checks (the claim exists, is not being deleted, is bound, and its
volume's claimRef names it back), then the volume's plugin: `hostPath` volumes are used in place (the
hostPath plugin, also what the local-path provisioner's volumes are), `local` volumes are bind-mounted at
`<pod>/volumes/kubernetes.io~local-volume/<pv>` as the kubelet's local plugin does. Other sources are
refused with the type named (FailedMount), never silently skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.api import storage
from nodeagent.kubelet.volumes.payloads import VolumeSourceError

LOCAL_PLUGIN_DIR = "kubernetes.io~local-volume"


def mode_mismatch(pod: Mapping[str, Any], volume_name: str, mode: str) -> str | None:
    """checkVolumeModeMismatch (desired state populator): a Block volume named in volumeMounts, or a
    Filesystem one in volumeDevices, cannot start."""
    spec = pod.get("spec") or {}
    containers = [c for f in ("initContainers", "containers", "ephemeralContainers")
                  for c in spec.get(f) or []]
    mounts = any(m.get("name") == volume_name for c in containers for m in c.get("volumeMounts") or [])
    devices = any(d.get("name") == volume_name for c in containers for d in c.get("volumeDevices") or [])
    if mode == "Block" and mounts:
        return f"volume {volume_name} has volumeMode Block, but is specified in volumeMounts"
    if mode != "Block" and devices:
        return f"volume {volume_name} has volumeMode Filesystem, but is specified in volumeDevices"
    return None


def resolve(pod: Mapping[str, Any], source: Mapping[str, Any], claim: Mapping[str, Any] | None,
            volume: Mapping[str, Any] | None) -> tuple[str, Mapping[str, Any]]:
    """(plugin, the volume's source) for a pod's claim, or VolumeSourceError saying why it cannot start.

    `claim` and `volume` are what the API holds (None: not found); the plugin is "hostPath", "local",
    "flexVolume" or "csi" (the last two set up by their registered VolumePlugin)."""
    ns = (pod.get("metadata") or {}).get("namespace") or "default"
    name = source.get("claimName", "")
    where = f"error processing PVC {ns}/{name}"
    if claim is None:
        raise VolumeSourceError(f'{where}: failed to fetch PVC from API server: persistentvolumeclaims '
                                f'"{name}" not found')
    if storage.meta(claim).get("deletionTimestamp"):
        raise VolumeSourceError(f"{where}: can't start pod because PVC {ns}/{name} is being deleted")
    phase = (claim.get("status") or {}).get("phase") or ""
    vname = storage.spec(claim).get("volumeName") or ""
    if phase != "Bound" or not vname:
        raise VolumeSourceError(f'{where}: PVC {ns}/{name} has non-bound phase ("{phase}") or empty '
                                f'pvc.Spec.VolumeName ("{vname}")')
    if volume is None:
        raise VolumeSourceError(f'{where}: failed to fetch PV {vname} from API server: persistentvolumes '
                                f'"{vname}" not found')
    ref = storage.spec(volume).get("claimRef") or {}
    if ref.get("uid") != storage.meta(claim).get("uid"):
        raise VolumeSourceError(f"{where}: the PV {vname}'s claimRef does not name this claim (uid "
                                f"{ref.get('uid')!r})")
    s = storage.spec(volume)
    if storage.volume_mode(volume) == "Block" and "local" not in s:
        kinds = [k for k in storage.PV_SOURCES if k in s]
        raise VolumeSourceError(f'{where}: volume "{vname}" has volumeMode Block, which its volume type '
                                f'{",".join(kinds) or "unknown"} does not support on this kubelet (local '
                                "volumes do)")
    for plugin in ("hostPath", "local", "flexVolume", "csi"):
        if plugin in s:
            return plugin, s[plugin] or {}
    kinds = [k for k in storage.PV_SOURCES if k in s]
    raise VolumeSourceError(f'{where}: volume "{vname}": volume type {",".join(kinds) or "unknown"} is '
                            "unimplemented")

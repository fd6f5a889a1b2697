"""The interface of the volume types the manager delegates to a plugin (FlexVolume; CSI).

The manager resolves a pod's volume (inline, or a claim's PV) to a `PluginVolume` and calls the plugin
registered for its source key (`flexVolume`, `csi`) to set it up at
`<pod dir>/volumes/<plugin.dir_name(volume)>/<volume.name>`. At teardown (a pod terminated or deleted, also
after a restart) it finds the plugin by that directory's name (`owns`), from what is on disk, as the
kubelet's reconstruction does; whatever no plugin owns is unmounted plainly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol


@dataclasses.dataclass(frozen=True)
class PluginVolume:
    """One volume of a pod for a plugin: its source (inline or the PV's), the name the kubelet calls it by
    (the pod's volume name, or the PV's name), read-only, and the pod's namespace (for secretRefs)."""

    kind: str  # the source's key: flexVolume, csi
    source: Mapping[str, Any]
    name: str
    read_only: bool
    namespace: str
    pv: Mapping[str, Any] | None = None  # the PersistentVolume, for a claim's volume


class VolumePlugin(Protocol):
    def dir_name(self, volume: PluginVolume) -> str:
        """The plugin's directory under the pod's volumes/ (e.g. `<vendor>~<driver>`, `kubernetes.io~csi`)."""

    def owns(self, dir_name: str) -> bool:
        """Whether a directory of that name under a pod's volumes/ holds this plugin's volumes."""

    def setup(self, pod: Mapping[str, Any], volume: PluginVolume, target: Path) -> Path | None:
        """Mount the volume at target (idempotent); on failure leave nothing mounted or made. Returns where
        the containers mount it when that is not target itself (CSI: `<target>/mount`, beside its
        vol_data.json)."""

    def teardown(self, target: Path) -> None:
        """Unmount target and remove it (idempotent; from the disk alone, after a restart too)."""

    def supports_metrics(self, target: Path) -> bool:
        """Whether the kubelet reports stats for this mounted volume (statfs of target)."""

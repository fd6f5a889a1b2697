"""What the scheduler needs from the API server, as small interfaces the client wires up.

- an event source: informers for Pods, Nodes, PodDisruptionBudgets, PriorityClasses, Namespaces
  (and Services/ReplicaSets/StatefulSets for default spreading) calling `EventHandler`;
- `Binder.bind`: POST pods/<name>/binding;
- `EventRecorder.event`: core/v1 Events (FailedScheduling, Scheduled, Preempted);
- `PodStatusPatcher.patch_status`: the PodScheduled condition and status.nominatedNodeName;
- `PodDeleter.delete`: graceful deletion of preemption victims;
- `Listers`: read access to the informers' caches that plugins consult;
- `VolumeAPI`: claims, volumes, StorageClasses and CSINodes for the volume plugins, and VolumeBinding's
  two writes (a volume's claimRef, a claim's selected-node).
In-memory implementations live in `nodeagent/testing/fake_cluster.py`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from nodeagent.api.selectors import Selector


class EventHandler(Protocol):
    def on_add(self, kind: str, obj: dict[str, Any]) -> None: ...
    def on_update(self, kind: str, old: dict[str, Any], new: dict[str, Any]) -> None: ...
    def on_delete(self, kind: str, obj: dict[str, Any]) -> None: ...


class EventSource(Protocol):
    async def run(self, handler: EventHandler, synced: asyncio.Event) -> None:
        """List then watch; call handler for every object and change; set `synced` after the lists."""


class Binder(Protocol):
    async def bind(self, namespace: str, name: str, uid: str, node_name: str) -> None: ...


class EventRecorder(Protocol):
    async def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None: ...


class PodStatusPatcher(Protocol):
    async def patch_status(self, namespace: str, name: str, *, condition: dict[str, Any] | None = None,
                           nominated_node_name: str | None = None) -> None: ...


class PodDeleter(Protocol):
    async def delete(self, namespace: str, name: str, uid: str,
                     grace_period_seconds: int | None = None) -> None: ...


class Listers(Protocol):
    def pdbs(self) -> list[dict[str, Any]]: ...
    def priority_classes(self) -> list[dict[str, Any]]: ...
    def namespace_labels(self) -> Mapping[str, Mapping[str, str]]: ...
    def owner_selectors(self, pod: Mapping[str, Any]) -> list[Selector]: ...


class VolumeAPI(Protocol):
    """The volume plugins' view of claims, volumes, classes and CSINodes, and VolumeBinding's writes."""
    def claim(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def volumes(self) -> list[dict[str, Any]]: ...
    def storage_class(self, name: str) -> dict[str, Any] | None: ...
    def csinode(self, name: str) -> dict[str, Any] | None: ...
    async def bind_volume(self, volume: dict[str, Any], claim: Mapping[str, Any]) -> None:
        """Set the volume's claimRef to the claim (the PV controller finishes the bind)."""
    async def select_node(self, claim: Mapping[str, Any], node_name: str) -> None:
        """Annotate the claim with volume.kubernetes.io/selected-node (dynamic provisioning)."""


@dataclasses.dataclass
class SchedulerAPI:
    binder: Binder
    recorder: EventRecorder
    patcher: PodStatusPatcher
    deleter: PodDeleter
    listers: Listers
    volumes: VolumeAPI | None = None  # None: the volume plugins pass every pod (in-memory fakes)

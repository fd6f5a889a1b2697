"""The driver's records: volumes and snapshots, in one JSON file replaced atomically on every change.

Every RPC runs refresh-free under one lock (`State.lock`): it reads the records, acts on the disk and the
mount table, then `save()`s, so an acknowledged CreateVolume or NodePublish survives a kill -9 of the
driver. What is on disk (volume directories, snapshot archives) is named by the ids, never by the
names a CO chose.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from pathlib import Path

from kernel.fs import atomic_write


@dataclasses.dataclass
class Volume:
    id: str
    name: str
    capacity: int
    access_type: str = "mount"  # mount | block
    source_snapshot: str = ""
    source_volume: str = ""
    ephemeral: bool = False  # made by NodePublish for an inline (csi.storage.k8s.io/ephemeral) volume
    parameters: dict[str, str] = dataclasses.field(default_factory=dict)
    staged: list[str] = dataclasses.field(default_factory=list)  # staging target paths
    # target path → {"readonly": bool, "access_mode": int}
    published: dict[str, dict] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Snapshot:
    id: str
    name: str
    source_volume: str
    size: int
    created: float  # seconds since the epoch


class State:
    """The records of one driver instance, persisted at `<root>/state.json`."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.file = self.root / "state.json"
        self.lock = threading.RLock()
        self.volumes: dict[str, Volume] = {}
        self.snapshots: dict[str, Snapshot] = {}
        self.volumes_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        self.snapshots_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        self._load()

    @property
    def volumes_dir(self) -> Path:
        return self.root / "volumes"

    @property
    def snapshots_dir(self) -> Path:
        return self.root / "snapshots"

    def volume_path(self, volume_id: str) -> str:
        return str(self.volumes_dir / volume_id)

    def snapshot_path(self, snapshot_id: str) -> str:
        return str(self.snapshots_dir / f"{snapshot_id}.tar.gz")

    def _load(self) -> None:
        try:
            data = json.loads(self.file.read_text())
        except FileNotFoundError:
            return
        self.volumes = {v["id"]: Volume(**v) for v in data.get("volumes", [])}
        self.snapshots = {s["id"]: Snapshot(**s) for s in data.get("snapshots", [])}

    def save(self) -> None:
        data = {"volumes": [dataclasses.asdict(v) for v in self.volumes.values()],
                "snapshots": [dataclasses.asdict(s) for s in self.snapshots.values()]}
        atomic_write(self.file, json.dumps(data, indent=1, sort_keys=True), 0o600)

    def volume_by_name(self, name: str) -> Volume | None:
        return next((v for v in self.volumes.values() if v.name == name and not v.ephemeral), None)

    def snapshot_by_name(self, name: str) -> Snapshot | None:
        return next((s for s in self.snapshots.values() if s.name == name), None)

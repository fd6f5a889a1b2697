"""The CPU manager's checkpoint, `<kubelet root>/cpu_manager_state`, in kubelet's JSON format.

    {"policyName":"static","defaultCpuSet":"0,2-3","entries":{"<pod uid>":{"<container>":"1"}},
     "checksum":1234567890}

The checksum is kubelet's: FNV-32a over the checkpoint as Go's spew prints it (`dump.ForHash`) with the
checksum zeroed, so a real kubelet accepts our file and we accept its. Written temp-then-rename.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from kernel.fs import atomic_write


class StateError(ValueError):
    """A checkpoint that cannot be used (kubelet's messages)."""


def _fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    policy_name: str
    default_cpu_set: str
    entries: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)

    def checksum(self) -> int:
        """What kubelet's CPUManagerCheckpointV2 writes: the spew %#v form under the V1 type name."""
        ents = " ".join(f"{uid}:map[" + " ".join(f"{c}:{s}" for c, s in sorted(cs.items())) + "]"
                        for uid, cs in sorted(self.entries.items()))
        text = (f"(*state.CPUManagerCheckpoint){{PolicyName:(string){self.policy_name} "
                f"DefaultCPUSet:(string){self.default_cpu_set} "
                f"Entries:(map[string]map[string]string)map[{ents}] Checksum:(checksum.Checksum)0}}")
        return _fnv32a(text.encode())

    def to_json(self) -> str:
        return json.dumps({"policyName": self.policy_name, "defaultCpuSet": self.default_cpu_set,
                           "entries": {u: dict(c) for u, c in self.entries.items()},
                           "checksum": self.checksum()}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise StateError(f"unable to restore state from disk ({e})") from None
        if not isinstance(doc, dict):
            raise StateError("unable to restore state from disk (not a JSON object)")
        entries = doc.get("entries") or {}
        if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
            raise StateError("unable to restore state from disk (entries: not a map of pods to containers)")
        cp = cls(str(doc.get("policyName", "")), str(doc.get("defaultCpuSet", "")),
                 {str(u): {str(k): str(v) for k, v in c.items()} for u, c in entries.items()})
        want = doc.get("checksum", 0)
        if want and want != cp.checksum():  # 0: accepted, as kubelet does for the old file backend
            raise StateError("checkpoint is corrupted")
        return cp


def load(path: Path) -> Checkpoint | None:
    """The checkpoint at `path`, None when there is none (blocking read)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return Checkpoint.from_json(text)


def store(path: Path, cp: Checkpoint) -> None:
    """Write the checkpoint atomically (blocking)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, cp.to_json().encode())

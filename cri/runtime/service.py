"""The runtime: pod sandboxes and containers on real namespaces and cgroups, state on disk.

Each operation is refresh → guard → act → persist, under the object's lock: the record's state enum
(cri/runtime/state.py) owns the guards. Each step that acquires something registers its undo, run if a
later step fails, so a failed call leaves nothing behind. Names are reserved before work starts
(ALREADY_EXISTS for a duplicate). Exits are learned from the shim (pidfd readable when it exits, then its
exit file), also for exits that happened while the daemon was down (recovered at start).

One module per verb group, as the CRI server (cri/server/) and containerd's CRI service are cut:

- core.py        options, tables, locks, lookups, persistence, the exit watcher, background cleanup
- sandboxes.py   RunPodSandbox, StopPodSandbox, RemovePodSandbox, PodSandboxStatus, ListPodSandbox
- containers.py  Create/Start/Stop/RemoveContainer, ContainerStatus, ListContainers, updates, exits
- spec.py        what a ContainerConfig becomes: checks, the launch document, credentials
- exec.py        ExecSync, and what Exec/Attach sessions take from the runtime
- stats.py       ContainerStats, PodSandboxStats
- events.py      GetContainerEvents
- recovery.py    start-up: records recovered from disk and reconciled with the kernel
"""

from __future__ import annotations

from cri.runtime.containers import ContainerVerbs
from cri.runtime.core import RuntimeCore, RuntimeOptions, StartError
from cri.runtime.events import EventVerbs
from cri.runtime.exec import ExecVerbs
from cri.runtime.recovery import Recovery
from cri.runtime.sandboxes import SandboxVerbs
from cri.runtime.stats import StatsVerbs

__all__ = ["Runtime", "RuntimeOptions", "StartError"]


class Runtime(SandboxVerbs, ContainerVerbs, ExecVerbs, StatsVerbs, EventVerbs, Recovery, RuntimeCore):
    """The runtime as a library: the CRI server is a thin gRPC layer over it; tests and benchmarks can
    drive it directly."""

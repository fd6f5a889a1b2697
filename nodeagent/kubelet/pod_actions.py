"""What one pod sync must do, from the spec and the runtime's records (kuberuntime computePodActions).

Pure: the pod worker lists the pod's sandboxes and containers through CRI, passes them with the probe
results, and gets back whether to (re)create the sandbox, kill the pod, which init container(s) and
containers to start and which containers to kill with which message. Backoff is not decided here: the
worker checks `backoff.CrashLoopBackoff` before each start it is told to make.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from nodeagent.kubelet.status import (
    ContainerRecord,
    container_hash,
    definition_changed_message,
    should_restart_container,
)


@dataclasses.dataclass(frozen=True)
class SandboxRecord:
    id: str
    ready: bool
    attempt: int = 0
    created_at: float = 0.0


@dataclasses.dataclass(frozen=True)
class KillInfo:
    name: str
    message: str
    reason: str = ""  # "", "LivenessProbe", "StartupProbe"


@dataclasses.dataclass
class PodActions:
    kill_pod: bool = False
    create_sandbox: bool = False
    sandbox_id: str = ""
    attempt: int = 0  # the new sandbox's attempt number
    init_containers_to_start: list[str] = dataclasses.field(default_factory=list)
    containers_to_start: list[str] = dataclasses.field(default_factory=list)
    containers_to_kill: dict[str, KillInfo] = dataclasses.field(default_factory=dict)  # container id → why
    ephemeral_to_start: list[str] = dataclasses.field(default_factory=list)  # never started yet
    init_failed: bool = False  # a regular init container failed and the pod will not restart it


def latest_records(records: Iterable[ContainerRecord]) -> dict[str, ContainerRecord]:
    """Each container name's newest record (by creation, then attempt)."""
    out: dict[str, ContainerRecord] = {}
    for r in records:
        cur = out.get(r.name)
        if cur is None or (r.created_at, r.attempt) > (cur.created_at, cur.attempt):
            out[r.name] = r
    return out


def _restart_on_failure(pod: Mapping[str, Any]) -> bool:
    return (pod.get("spec") or {}).get("restartPolicy", "Always") != "Never"


def sandbox_changed(sandboxes: Iterable[SandboxRecord]) -> tuple[bool, int, str]:
    """podSandboxChanged: (needs a new sandbox, its attempt, the current sandbox id)."""
    boxes = sorted(sandboxes, key=lambda s: s.created_at, reverse=True)
    if not boxes:
        return True, 0, ""
    ready = [s for s in boxes if s.ready]
    latest = boxes[0]
    if len(ready) > 1:
        return True, latest.attempt + 1, latest.id  # more than one ready sandbox: reconcile by recreating
    if not latest.ready:
        return True, latest.attempt + 1, latest.id
    return False, latest.attempt, latest.id


def compute_pod_actions(pod: Mapping[str, Any], sandboxes: Iterable[SandboxRecord],
                        records: Iterable[ContainerRecord], *, liveness_failed: Collection[str] = (),
                        startup_failed: Collection[str] = (), started: Mapping[str, bool] | None = None
                        ) -> PodActions:
    """liveness_failed / startup_failed: container ids whose probe result is Failure; started: name → startup
    done (for sidecars, which must start before the next init container)."""
    spec = pod.get("spec") or {}
    inits = list(spec.get("initContainers") or [])
    apps = list(spec.get("containers") or [])
    records = list(records)
    latest = latest_records(records)
    started = started or {}
    create, attempt, sandbox_id = sandbox_changed(sandboxes)
    actions = PodActions(create_sandbox=create, attempt=attempt, sandbox_id=sandbox_id)

    if create:
        if not _restart_on_failure(pod) and attempt != 0 and records:
            actions.create_sandbox = False  # a Never pod whose containers all ran: just kill it
            actions.kill_pod = True
            return actions
        actions.kill_pod = bool(sandbox_id)  # clean up the old sandbox and its containers first
        if inits:
            actions.init_containers_to_start = [inits[0]["name"]]
            return actions
        for c in apps:
            r = latest.get(c["name"])
            if spec.get("restartPolicy") == "OnFailure" and r is not None and r.state == "exited" \
                    and r.exit_code == 0:
                continue
            actions.containers_to_start.append(c["name"])
        return actions

    # Ephemeral containers start once, even before initialization completes, and never restart.
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        actions.ephemeral_to_start = [c["name"] for c in spec.get("ephemeralContainers") or []
                                      if c["name"] not in latest]

    # -- init containers: one at a time, sidecars must have started before the next one runs --
    has_initialized = any(c["name"] in latest for c in apps)
    initialized = True
    for c in inits:
        r = latest.get(c["name"])
        sidecar = c.get("restartPolicy") == "Always"
        if sidecar:
            if r is None or r.state != "running":
                actions.init_containers_to_start.append(c["name"])
                if not has_initialized:
                    initialized = False
                    break
                continue
            kill = _probe_kill(c, r, liveness_failed, startup_failed, restart=True)
            if kill is not None:
                actions.containers_to_kill[r.id] = kill
                actions.init_containers_to_start.append(c["name"])
                continue
            if not has_initialized and not started.get(c["name"], True):
                initialized = False  # wait for its startup probe
                break
            continue
        if has_initialized:
            continue  # regular init containers ran before; they are not run again
        if r is None or r.state in ("created", "unknown"):
            actions.init_containers_to_start.append(c["name"])
            initialized = False
            break
        if r.state == "running":
            initialized = False
            break
        if r.exit_code == 0:
            continue
        initialized = False
        if _restart_on_failure(pod):
            actions.init_containers_to_start.append(c["name"])
        else:
            actions.init_failed = True
            actions.kill_pod = True
        break
    if not initialized:
        return actions

    # -- regular containers --
    keep = 0
    for c in apps:
        r = latest.get(c["name"])
        if r is None or r.state != "running":
            if should_restart_container(pod, c, r):
                actions.containers_to_start.append(c["name"])
            continue
        restart = _restart_on_failure(pod)
        if r.hash and r.hash != container_hash(c):
            actions.containers_to_kill[r.id] = KillInfo(c["name"], definition_changed_message(c["name"]))
            actions.containers_to_start.append(c["name"])
            continue
        kill = _probe_kill(c, r, liveness_failed, startup_failed, restart)
        if kill is not None:
            actions.containers_to_kill[r.id] = kill
            if restart:
                actions.containers_to_start.append(c["name"])
            continue
        keep += 1
    if keep == 0 and not actions.containers_to_start:
        # Nothing left to run: stop the sandbox, and do not restart sidecars that would keep the pod alive.
        actions.kill_pod = True
        actions.init_containers_to_start = []
    return actions


def _probe_kill(c: Mapping[str, Any], r: ContainerRecord, liveness_failed: Collection[str],
                startup_failed: Collection[str], restart: bool) -> KillInfo | None:
    for failed, kind, reason in ((liveness_failed, "liveness", "LivenessProbe"),
                                 (startup_failed, "startup", "StartupProbe")):
        if r.id in failed or r.container_id in failed:
            msg = f"Container {c['name']} failed {kind} probe"
            return KillInfo(c["name"], f"{msg}, will be restarted" if restart else msg, reason)
    return None

"""Pod status from runtime container records (kubelet generateAPIPodStatus, getPhase, status/generate.go).

Pure: the pod worker passes the pod, the CRI container records, the reasons its last sync failed per
container (the kubelet's reasonCache), the prober's ready/started results and the previous status; this
returns the v1.PodStatus dict to publish. Also the container hash that detects spec changes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodeagent.api.qos import pod_qos
from nodeagent.api.times import rfc3339
from nodeagent.kubelet.static_pods import is_static_pod

# Waiting reasons (kubelet images/errors.go, kuberuntime, kubelet_pods.go)
CONTAINER_CREATING = "ContainerCreating"
POD_INITIALIZING = "PodInitializing"
CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
ERR_IMAGE_PULL = "ErrImagePull"
ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"
INVALID_IMAGE_NAME = "InvalidImageName"
CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
CREATE_CONTAINER_ERROR = "CreateContainerError"
RUN_CONTAINER_ERROR = "RunContainerError"
# Terminated reasons (set by the runtime; computed here when it leaves them empty)
OOM_KILLED = "OOMKilled"
ERROR = "Error"
COMPLETED = "Completed"
CONTAINER_STATUS_UNKNOWN = "ContainerStatusUnknown"

KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")


def container_hash(container: Mapping[str, Any]) -> int:
    """HashContainer: FNV-32a over the JSON of the fields whose change needs a new container.

    Like kubelet >= 1.31, only name and image are hashed (the rest of a pod spec is immutable, and resources
    are resized in place). The value is ours (kubelet feeds Go's spew dump of the bytes to the hash), so it is
    only compared with hashes this agent wrote, in the io.kubernetes.container.hash label.
    """
    data = json.dumps({"image": container.get("image", ""), "name": container.get("name", "")},
                      separators=(",", ":"), sort_keys=True).encode()
    h = 0x811C9DC5
    for b in data:
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def definition_changed_message(container_name: str) -> str:
    """The Killing event message when a running container's hash no longer matches its spec."""
    return f"Container {container_name} definition changed, will be restarted"


@dataclasses.dataclass(frozen=True)
class ContainerRecord:
    """One runtime container (CRI ContainerStatus), the kubelet's kubecontainer.Status."""

    name: str
    id: str
    state: str  # "created", "running", "exited", "unknown"
    attempt: int = 0
    created_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    image: str = ""
    image_id: str = ""
    hash: int = 0
    runtime: str = "containerd"

    @property
    def container_id(self) -> str:
        return f"{self.runtime}://{self.id}"


@dataclasses.dataclass(frozen=True)
class SyncError:
    """Why the last sync could not start a container: reason (CrashLoopBackOff, ErrImagePull, ...) +
    message."""

    reason: str
    message: str = ""


def terminated_reason(exit_code: int, oom_killed: bool = False) -> str:
    """The reason the runtime reports for an exited container: OOMKilled, Completed or Error."""
    if oom_killed:
        return OOM_KILLED
    return COMPLETED if exit_code == 0 else ERROR


def _state_of(rec: ContainerRecord) -> dict[str, Any]:
    if rec.state == "running":
        return {"running": {"startedAt": rfc3339(rec.started_at)}}
    if rec.state == "exited":
        t: dict[str, Any] = {"exitCode": rec.exit_code,
                             "reason": rec.reason or terminated_reason(rec.exit_code),
                             "startedAt": rfc3339(rec.started_at) if rec.started_at else None,
                             "finishedAt": rfc3339(rec.finished_at) if rec.finished_at else None,
                             "containerID": rec.container_id}
        if rec.message:
            t["message"] = rec.message
        return {"terminated": t}
    # created or unknown: "waiting to be running", with no reason (kubelet convertContainerStatus)
    return {"waiting": {}}


def should_restart_container(pod: Mapping[str, Any], container: Mapping[str, Any],
                             latest: ContainerRecord | None, is_init: bool = False) -> bool:
    """ShouldContainerBeRestarted: start it when it never ran, is created/unknown, or exited and the restart
    policy (the pod's, or Always for a sidecar) allows; never once the pod is being deleted."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if latest is None:
        return True
    if latest.state == "running":
        return False
    if latest.state in ("created", "unknown"):
        return True
    if is_init and container.get("restartPolicy") == "Always":
        return True
    policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
    if policy == "Never":
        return False
    if policy == "OnFailure" or is_init:
        return latest.exit_code != 0
    return True


def container_statuses(pod: Mapping[str, Any], containers: Iterable[Mapping[str, Any]],
                       records: Iterable[ContainerRecord], *, is_init: bool,
                       sync_errors: Mapping[str, SyncError] | None = None,
                       ready: Mapping[str, bool] | None = None, started: Mapping[str, bool] | None = None,
                       old_statuses: Iterable[Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """convertToAPIContainerStatuses for one list (app or init containers)."""
    spec = pod.get("spec") or {}
    has_init = bool(spec.get("initContainers"))
    default_reason = POD_INITIALIZING if has_init else CONTAINER_CREATING
    by_name: dict[str, list[ContainerRecord]] = {}
    for rec in records:
        by_name.setdefault(rec.name, []).append(rec)
    old = {s.get("name"): s for s in old_statuses or []}
    sync_errors = sync_errors or {}
    ready = ready or {}
    started = started or {}
    out = []
    for c in containers:
        name = c["name"]
        recs = sorted(by_name.get(name, []), key=lambda r: (r.created_at, r.attempt), reverse=True)
        status: dict[str, Any] = {"name": name, "image": c.get("image", ""), "imageID": "",
                                  "state": {"waiting": {"reason": default_reason}}, "lastState": {},
                                  "ready": False, "restartCount": 0, "started": False}
        latest = recs[0] if recs else None
        if latest is not None:
            status["state"] = _state_of(latest)
            status["containerID"] = latest.container_id
            status["imageID"] = latest.image_id
            if latest.image:
                status["image"] = latest.image
            status["restartCount"] = latest.attempt
            running = latest.state == "running"
            status["started"] = running and started.get(name, True)
            status["ready"] = running and status["started"] and ready.get(name, True)
            if len(recs) > 1 and recs[1].state == "exited":
                status["lastState"] = _state_of(recs[1])
        elif name in old and "running" in (old[name].get("state") or {}):
            # The runtime lost a container it had reported running (kubelet's ContainerStatusUnknown).
            status["state"] = {"terminated": {
                "exitCode": 137, "reason": CONTAINER_STATUS_UNKNOWN,
                "message": "The container could not be located when the pod was terminated"}}
            status["lastState"] = old[name].get("lastState") or {}
            status["restartCount"] = old[name].get("restartCount", 0)
        err = sync_errors.get(name)
        if err is not None and (latest is None or latest.state != "running") and \
                should_restart_container(pod, c, latest, is_init):
            if "terminated" in status["state"]:
                status["lastState"] = status["state"]
            waiting = {"reason": err.reason}
            if err.message:
                waiting["message"] = err.message
            status["state"] = {"waiting": waiting}
        out.append(status)
    return out


def _is_sidecar(c: Mapping[str, Any]) -> bool:
    return c.get("restartPolicy") == "Always"


def _find(statuses: Iterable[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    for s in statuses:
        if s.get("name") == name:
            return s
    return None


def _has(status: Mapping[str, Any], key: str) -> bool:
    return bool(status.get(key) or {})


def pod_phase(pod: Mapping[str, Any], init_statuses: Sequence[Mapping[str, Any]],
              statuses: Sequence[Mapping[str, Any]], pod_is_terminal: bool = False) -> str:
    """getPhase: Pending / Running / Succeeded / Failed from container states and restartPolicy."""
    spec = pod.get("spec") or {}
    policy = spec.get("restartPolicy", "Always")
    pending_init = pending_sidecars = failed_init = 0
    for c in spec.get("initContainers") or []:
        s = _find(init_statuses, c["name"])
        state = (s or {}).get("state") or {}
        last = (s or {}).get("lastState") or {}
        if _is_sidecar(c):
            if s is None:
                pending_sidecars += 1
            elif "running" in state:
                if not s.get("started"):
                    pending_sidecars += 1
            elif "terminated" in state:
                pass
            elif "waiting" in state:
                if "terminated" not in last:
                    pending_sidecars += 1
            else:
                pending_sidecars += 1
            continue
        if s is None or "running" in state:
            pending_init += 1
        elif "terminated" in state:
            if state["terminated"].get("exitCode", 0) != 0:
                failed_init += 1
        elif "waiting" in state:
            if "terminated" in last:
                if last["terminated"].get("exitCode", 0) != 0:
                    failed_init += 1
            else:
                pending_init += 1
        else:
            pending_init += 1
    unknown = running = waiting = stopped = succeeded = 0
    for c in spec.get("containers") or []:
        s = _find(statuses, c["name"])
        if s is None:
            unknown += 1
            continue
        state = s.get("state") or {}
        last = s.get("lastState") or {}
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            if state["terminated"].get("exitCode", 0) == 0:
                succeeded += 1
        elif "waiting" in state:
            if "terminated" in last:
                stopped += 1
            else:
                waiting += 1
        else:
            unknown += 1
    if failed_init > 0 and policy == "Never":
        return "Failed"
    # Once a regular container has run, restarting sidecars no longer hold the pod in Pending.
    pod_has_initialized = any(
        _has(s.get("state") or {}, "running") or _has(s.get("state") or {}, "terminated")
        or _has(s.get("lastState") or {}, "terminated")
        for s in statuses if s.get("name") in {c["name"] for c in spec.get("containers") or []})
    if pending_init > 0 or (pending_sidecars > 0 and not pod_has_initialized):
        return "Pending"
    if waiting > 0:
        return "Pending"
    if running > 0 and unknown == 0:
        return "Running"
    if running == 0 and stopped > 0 and unknown == 0:
        if pod_is_terminal and not is_static_pod(pod):
            return "Succeeded" if stopped == succeeded else "Failed"
        if policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"


def _go_list(names: list[str]) -> str:
    return "[" + " ".join(names) + "]"


def _cond(type_: str, status: bool | str, reason: str = "", message: str = "") -> dict[str, Any]:
    c: dict[str, Any] = {"type": type_,
                         "status": status if isinstance(status, str) else ("True" if status else "False")}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def initialized_condition(pod: Mapping[str, Any], init_statuses: Sequence[Mapping[str, Any]],
                          statuses: Sequence[Mapping[str, Any]], phase: str) -> dict[str, Any]:
    spec = pod.get("spec") or {}
    inits = spec.get("initContainers") or []
    if not inits:
        return _cond("Initialized", True)
    unknown, incomplete = [], []
    for c in inits:
        s = _find(init_statuses, c["name"])
        if s is None:
            unknown.append(c["name"])
            continue
        if _is_sidecar(c):
            if not s.get("started"):
                incomplete.append(c["name"])
            continue
        term = (s.get("state") or {}).get("terminated")
        if term is None or term.get("exitCode", 0) != 0:
            incomplete.append(c["name"])
    if phase == "Succeeded" and not unknown:
        return _cond("Initialized", True, "PodCompleted")
    app_names = {c["name"] for c in spec.get("containers") or []}
    for s in statuses:
        if s.get("name") in app_names and (_has(s.get("state") or {}, "running")
                                           or _has(s.get("state") or {}, "terminated")
                                           or _has(s.get("lastState") or {}, "terminated")):
            return _cond("Initialized", True)
    msgs = []
    if unknown:
        msgs.append(f"containers with unknown status: {_go_list(unknown)}")
    if incomplete:
        msgs.append(f"containers with incomplete status: {_go_list(incomplete)}")
    if msgs:
        return _cond("Initialized", False, "ContainersNotInitialized", ", ".join(msgs))
    return _cond("Initialized", True)


def containers_ready_condition(pod: Mapping[str, Any], all_statuses: Sequence[Mapping[str, Any]] | None,
                               phase: str) -> dict[str, Any]:
    if all_statuses is None:
        return _cond("ContainersReady", False, "UnknownContainerStatuses")
    spec = pod.get("spec") or {}
    unknown, unready = [], []
    sidecars = [c for c in spec.get("initContainers") or [] if _is_sidecar(c)]
    watched = sidecars + list(spec.get("containers") or [])
    for c in watched:
        s = _find(all_statuses, c["name"])
        if s is None:
            unknown.append(c["name"])
        elif not s.get("ready"):
            unready.append(c["name"])
    if phase == "Succeeded" and not unknown:
        return _cond("ContainersReady", False, "PodCompleted")
    if phase == "Failed":
        return _cond("ContainersReady", False, "PodFailed")
    msgs = []
    if unknown:
        msgs.append(f"containers with unknown status: {_go_list(unknown)}")
    if unready:
        msgs.append(f"containers with unready status: {_go_list(unready)}")
    if msgs:
        return _cond("ContainersReady", False, "ContainersNotReady", ", ".join(msgs))
    return _cond("ContainersReady", True)


def ready_condition(pod: Mapping[str, Any], containers_ready: Mapping[str, Any],
                    conditions: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """PodReady: ContainersReady, then every readiness gate's condition must be True."""
    if containers_ready["status"] != "True":
        return _cond("Ready", containers_ready["status"], containers_ready.get("reason", ""),
                     containers_ready.get("message", ""))
    by_type = {c.get("type"): c for c in conditions}
    msgs = []
    for gate in (pod.get("spec") or {}).get("readinessGates") or []:
        t = gate.get("conditionType")
        c = by_type.get(t)
        if c is None:
            msgs.append(f'corresponding condition of pod readiness gate "{t}" does not exist.')
        elif c.get("status") != "True":
            msgs.append(f'the status of pod readiness gate "{t}" is not "True", but {c.get("status")}')
    if msgs:
        return _cond("Ready", False, "ReadinessGatesNotReady", ", ".join(msgs))
    return _cond("Ready", True)


def _merge_conditions(new: list[dict[str, Any]], old: Iterable[Mapping[str, Any]],
                      now: float) -> list[dict[str, Any]]:
    """Keep conditions others own (readiness gates, DisruptionTarget...), and lastTransitionTime when a
    condition's status did not change (status manager updateLastTransitionTime)."""
    old_by_type = {c.get("type"): c for c in old}
    out = []
    for cond in new:
        prev = old_by_type.get(cond["type"])
        c = dict(cond)
        c["lastProbeTime"] = None
        if prev is not None and prev.get("status") == c["status"] and prev.get("lastTransitionTime"):
            c["lastTransitionTime"] = prev["lastTransitionTime"]
        else:
            c["lastTransitionTime"] = rfc3339(now)
        out.append(c)
    ours = {c["type"] for c in out}
    for kept in old:
        if kept.get("type") not in ours and kept.get("type") not in KUBELET_CONDITIONS:
            out.append(dict(kept))
    return out


def generate_pod_status(pod: Mapping[str, Any], records: Iterable[ContainerRecord], *, now: float,
                        sync_errors: Mapping[str, SyncError] | None = None,
                        ready: Mapping[str, bool] | None = None, started: Mapping[str, bool] | None = None,
                        pod_ips: Iterable[str] = (), host_ips: Iterable[str] = (),
                        sandbox_ready: bool | None = None, pod_is_terminal: bool = False) -> dict[str, Any]:
    """The v1.PodStatus for `pod` (its current `status` is the old one the status manager merges with)."""
    records = list(records)
    spec = pod.get("spec") or {}
    old = pod.get("status") or {}
    init_st = container_statuses(pod, spec.get("initContainers") or [], records, is_init=True,
                                 sync_errors=sync_errors, ready=ready, started=started,
                                 old_statuses=old.get("initContainerStatuses"))
    app_st = container_statuses(pod, spec.get("containers") or [], records, is_init=False,
                                sync_errors=sync_errors, ready=ready, started=started,
                                old_statuses=old.get("containerStatuses"))
    phase = pod_phase(pod, init_st, app_st, pod_is_terminal)
    if old.get("phase") in ("Succeeded", "Failed"):
        phase = old["phase"]  # pods never leave a terminal phase (kubelet forces the API's back)
    conds = []
    if sandbox_ready is not None:
        conds.append(_cond("PodReadyToStartContainers", sandbox_ready))
    conds.append(initialized_condition(pod, init_st, app_st, phase))
    cready = containers_ready_condition(pod, init_st + app_st, phase)
    conds.append(ready_condition(pod, cready, old.get("conditions") or []))
    conds.append(cready)
    conds.append(_cond("PodScheduled", True))
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": _merge_conditions(conds, old.get("conditions") or [], now),
        "qosClass": pod_qos(pod),
        "startTime": old.get("startTime") or rfc3339(now),
        "containerStatuses": app_st,
    }
    if spec.get("initContainers"):
        status["initContainerStatuses"] = init_st
    if spec.get("ephemeralContainers"):
        eph = container_statuses(pod, spec["ephemeralContainers"], records, is_init=False,
                                 sync_errors=sync_errors, old_statuses=old.get("ephemeralContainerStatuses"))
        for e in eph:  # ephemeral containers are never ready (they have no probes and serve nothing)
            e["ready"] = False
        status["ephemeralContainerStatuses"] = eph
    ips = list(pod_ips)
    if ips:
        status["podIP"] = ips[0]
        status["podIPs"] = [{"ip": ip} for ip in ips]
    hips = list(host_ips)
    if hips:
        status["hostIP"] = hips[0]
        status["hostIPs"] = [{"ip": ip} for ip in hips]
    for key in ("reason", "message", "nominatedNodeName"):
        if old.get(key) and phase == old.get("phase"):  # e.g. Evicted stays with its Failed phase
            status[key] = old[key]
    return status

"""The Job controller's decisions: how many pods to run, when the Job is Complete or Failed, backoff, TTL.

Pure functions (pkg/controller/job, NonIndexed completion mode): run
min(parallelism, completions - succeeded) pods; a failure count above
backoffLimit or a run longer than activeDeadlineSeconds fails the Job; new pods
after failures wait base * 2^(failures-1) seconds (capped); a finished Job with
ttlSecondsAfterFinished is deleted that long after it finished.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.controllers import podutil
from nodeagent.controllers.options import iso

JOB_NAME_LABELS = ("job-name", "batch.kubernetes.io/job-name")
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")


@dataclasses.dataclass
class Plan:
    create: int = 0
    create_indexes: list[int] = dataclasses.field(default_factory=list)  # Indexed mode: indexes to start
    delete: list[Mapping[str, Any]] = dataclasses.field(default_factory=list)
    status: dict = dataclasses.field(default_factory=dict)
    finished: str | None = None  # "Complete" / "Failed" when this sync finishes the Job
    reason: str = ""
    message: str = ""
    requeue_after: float | None = None


def finished_condition(job: Mapping[str, Any]) -> dict | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return c
    return None


def _phase(pod: Mapping[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase", "")


def _finished_at(pod: Mapping[str, Any]) -> dt.datetime | None:
    best = None
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        t = podutil.parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        if t and (best is None or t > best):
            best = t
    if best is None:
        for c in (pod.get("status") or {}).get("conditions") or []:
            t = podutil.parse_time(c.get("lastTransitionTime"))
            if t and (best is None or t > best):
                best = t
    return best or podutil.parse_time((pod.get("metadata") or {}).get("creationTimestamp"))


def backoff_delay(failures: int, base: float, cap: float) -> float:
    """Seconds to wait before the next pod after `failures` failed ones (0 when none failed)."""
    if failures <= 0:
        return 0.0
    return min(base * (2 ** min(failures - 1, 30)), cap)


def pod_template_labels(job: Mapping[str, Any]) -> dict[str, str]:
    meta = job["metadata"]
    return {**dict.fromkeys(JOB_NAME_LABELS, meta["name"]), **dict.fromkeys(UID_LABELS, meta.get("uid", ""))}


def plan(job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], now: dt.datetime,
         backoff_base: float = 10.0, backoff_max: float = 360.0) -> Plan:
    spec = job.get("spec") or {}
    old = job.get("status") or {}
    pods = list(pods)
    active = [p for p in pods if podutil.is_pod_active(p)]
    succeeded = max(sum(1 for p in pods if _phase(p) == "Succeeded"), int(old.get("succeeded") or 0))
    failed_pods = [p for p in pods if _phase(p) == "Failed"]
    failed = max(len(failed_pods), int(old.get("failed") or 0))
    parallelism = int(spec.get("parallelism", 1) or 0)
    completions = spec.get("completions")
    backoff_limit = int(spec.get("backoffLimit", 6))
    suspended = bool(spec.get("suspend"))
    out = Plan()
    st: dict[str, Any] = {"active": len(active), "succeeded": succeeded, "failed": failed,
                          "ready": sum(1 for p in active if podutil.is_pod_ready(p))}
    if old.get("startTime"):
        st["startTime"] = old["startTime"]
    elif not suspended:
        st["startTime"] = iso(now)
    out.status = st
    if finished_condition(job):
        out.delete = active
        return out

    start = podutil.parse_time(st.get("startTime"))
    deadline = spec.get("activeDeadlineSeconds")
    if failed > backoff_limit:
        out.finished, out.reason, out.message = "Failed", "BackoffLimitExceeded", \
            "Job has reached the specified backoff limit"
    elif deadline is not None and start is not None and not suspended:
        left = start.timestamp() + float(deadline) - now.timestamp()
        if left <= 0:
            out.finished, out.reason, out.message = "Failed", "DeadlineExceeded", \
                "Job was active longer than specified deadline"
        else:
            out.requeue_after = left
    if spec.get("completionMode") == "Indexed" and completions is not None:
        done_idx = succeeded_indexes(pods, int(completions))
        st["succeeded"] = succeeded = max(len(done_idx), int(old.get("succeeded") or 0))
        st["completedIndexes"] = format_indexes(done_idx)
    if out.finished is None:
        done = succeeded >= int(completions) if completions is not None else (succeeded > 0 and not active)
        if done:
            out.finished, out.reason, out.message = "Complete", "", ""
    if out.finished:
        out.delete = active
        st["active"] = 0
        cond = {"type": out.finished, "status": "True", "lastProbeTime": iso(now),
                "lastTransitionTime": iso(now)}
        if out.reason:
            cond.update(reason=out.reason, message=out.message)
        st["conditions"] = [*(old.get("conditions") or []), cond]
        if out.finished == "Complete":
            st["completionTime"] = iso(now)
        return out

    if spec.get("completionMode") == "Indexed" and completions is not None:
        _plan_indexed(out, active, pods, int(completions), 0 if suspended else parallelism,
                      failed, failed_pods, now, backoff_base, backoff_max)
        return out
    if suspended:
        wanted = 0
    elif completions is None:
        wanted = parallelism if succeeded == 0 else 0
    else:
        wanted = max(min(parallelism, int(completions) - succeeded), 0)
    if len(active) > wanted:
        out.delete = podutil.pods_to_delete(active, len(active) - wanted)
    elif len(active) < wanted:
        delay = backoff_delay(failed, backoff_base, backoff_max)
        last = max((t for t in (_finished_at(p) for p in failed_pods) if t), default=None)
        wait = (last.timestamp() + delay - now.timestamp()) if (delay and last) else 0.0
        if wait > 0:
            out.requeue_after = min(wait, out.requeue_after or wait)
        else:
            out.create = wanted - len(active)
    return out


def pod_index(pod: Mapping[str, Any]) -> int | None:
    meta = pod.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(INDEX_KEY) or (meta.get("labels") or {}).get(INDEX_KEY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def succeeded_indexes(pods: Iterable[Mapping[str, Any]], completions: int) -> set[int]:
    return {i for p in pods
            if _phase(p) == "Succeeded" and (i := pod_index(p)) is not None and 0 <= i < completions}


def format_indexes(indexes: Iterable[int]) -> str:
    """status.completedIndexes: sorted ranges, "0-2,4"."""
    out: list[str] = []
    run: list[int] = []
    for i in sorted(set(indexes)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def _plan_indexed(out: Plan, active: list[Mapping[str, Any]], pods: list[Mapping[str, Any]], completions: int,
                  parallelism: int, failed: int, failed_pods: list[Mapping[str, Any]], now: dt.datetime,
                  base: float, cap: float) -> None:
    """Indexed mode: one pod per index not yet succeeded, lowest first, at most `parallelism` at once."""
    done = succeeded_indexes(pods, completions)
    running: dict[int, Mapping[str, Any]] = {}
    for p in sorted(active, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or ""):
        i = pod_index(p)
        if i is None or not 0 <= i < completions or i in done or i in running:
            out.delete.append(p)  # invalid, finished or duplicate index
        else:
            running[i] = p
    extra = len(running) - parallelism
    if extra > 0:
        for i in sorted(running, reverse=True)[:extra]:
            out.delete.append(running.pop(i))
    pending = [i for i in range(completions) if i not in done and i not in running]
    room = parallelism - len(running)
    if room <= 0 or not pending:
        return
    delay = backoff_delay(failed, base, cap)
    last = max((t for t in (_finished_at(p) for p in failed_pods) if t), default=None)
    wait = (last.timestamp() + delay - now.timestamp()) if (delay and last) else 0.0
    if wait > 0:
        out.requeue_after = min(wait, out.requeue_after or wait)
        return
    out.create_indexes = pending[:room]


def indexed_pod(pod: dict, job_name: str, index: int) -> dict:
    """Stamp a pod for one completion index: annotation, label, hostname, JOB_COMPLETION_INDEX."""
    meta = pod["metadata"]
    meta["generateName"] = f"{job_name}-{index}-"
    meta.setdefault("annotations", {})[INDEX_KEY] = str(index)
    meta.setdefault("labels", {})[INDEX_KEY] = str(index)
    pod["spec"].setdefault("hostname", f"{job_name}-{index}")
    for c in [*(pod["spec"].get("initContainers") or []), *(pod["spec"].get("containers") or [])]:
        env = [e for e in c.get("env") or [] if e.get("name") != "JOB_COMPLETION_INDEX"]
        env.append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
        c["env"] = env
    return pod


def ttl_left(job: Mapping[str, Any], now: dt.datetime) -> float | None:
    """Seconds until a finished Job with ttlSecondsAfterFinished is due for deletion (<= 0: now)."""
    ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
    cond = finished_condition(job)
    if ttl is None or cond is None:
        return None
    done = podutil.parse_time((job.get("status") or {}).get("completionTime")
                              or cond.get("lastTransitionTime"))
    if done is None:
        return None
    return done.timestamp() + float(ttl) - now.timestamp()

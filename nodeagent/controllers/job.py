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
UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")


@dataclasses.dataclass
class Plan:
    create: int = 0
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
    if out.finished is None:
        done = succeeded >= int(completions) if completions is not None else (succeeded > 0 and not active)
        if done:
            out.finished, out.reason, out.message = "Complete", "", ""
    if out.finished:
        out.delete = active
        st["active"] = 0
        cond = {"type": out.finished, "status": "True", "lastProbeTime": iso(now), "lastTransitionTime": iso(now)}
        if out.reason:
            cond.update(reason=out.reason, message=out.message)
        st["conditions"] = [*(old.get("conditions") or []), cond]
        if out.finished == "Complete":
            st["completionTime"] = iso(now)
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


def ttl_left(job: Mapping[str, Any], now: dt.datetime) -> float | None:
    """Seconds until a finished Job with ttlSecondsAfterFinished is due for deletion (<= 0: now)."""
    ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
    cond = finished_condition(job)
    if ttl is None or cond is None:
        return None
    done = podutil.parse_time((job.get("status") or {}).get("completionTime") or cond.get("lastTransitionTime"))
    if done is None:
        return None
    return done.timestamp() + float(ttl) - now.timestamp()

"""The CronJob controller's decisions: which scheduled time to start now, concurrency, history, deadlines.

Pure functions with the time passed in (pkg/controller/cronjob, v2 controller).
The schedule is parsed by croniter (UTC; `TZ=`/`CRON_TZ=` prefixes and
spec.timeZone are honoured when the zone is known). The most recent missed start
after lastScheduleTime (or creation) is run once, unless it is older than
startingDeadlineSeconds; Forbid waits for the active Job, Replace deletes it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import zoneinfo
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.controllers import job as jobs
from nodeagent.controllers import podutil
from nodeagent.controllers.options import iso

SCHEDULED_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
MAX_MISSED = 100


class InvalidSchedule(ValueError):
    pass


def parse_schedule(schedule: str, time_zone: str | None = None) -> tuple[str, dt.tzinfo]:
    """(croniter expression, zone) for a CronJob schedule; raises InvalidSchedule."""
    from croniter import croniter  # here, not at import: croniter and dateutil cost ~1 MiB in every server

    expr = schedule.strip()
    tz: dt.tzinfo = dt.UTC
    for prefix in ("CRON_TZ=", "TZ="):
        if expr.startswith(prefix):
            zone, _, expr = expr[len(prefix):].partition(" ")
            time_zone = zone
    if time_zone:
        try:
            tz = zoneinfo.ZoneInfo(time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as e:
            raise InvalidSchedule(f"unknown time zone {time_zone}") from e
    if not croniter.is_valid(expr.strip()):
        raise InvalidSchedule(f"unparseable schedule {schedule!r}")
    return expr.strip(), tz


def missed_times(expr: str, tz: dt.tzinfo, earliest: dt.datetime, now: dt.datetime
                 ) -> tuple[dt.datetime | None, int, dt.datetime]:
    """(most recent start time in (earliest, now], how many there were (capped at MAX_MISSED+1), next after
    now)."""
    from croniter import croniter

    it = croniter(expr, earliest.astimezone(tz))
    last, count = None, 0
    while True:
        t = it.get_next(dt.datetime)
        if t > now:
            return last, count, t
        last, count = t, count + 1
        if count > MAX_MISSED:
            last = croniter(expr, (now + dt.timedelta(microseconds=1)).astimezone(tz)).get_prev(dt.datetime)
            nxt = croniter(expr, now.astimezone(tz)).get_next(dt.datetime)
            return last, count, nxt


def job_name(cronjob_name: str, scheduled: dt.datetime) -> str:
    """getJobName: the scheduled time in minutes, so one start time makes one Job."""
    return f"{cronjob_name}-{int(scheduled.timestamp()) // 60}"


def job_from_template(cj: Mapping[str, Any], scheduled: dt.datetime) -> dict:
    jt = (cj.get("spec") or {}).get("jobTemplate") or {}
    tmeta = jt.get("metadata") or {}
    meta = cj["metadata"]
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name(meta["name"], scheduled), "namespace": meta.get("namespace", "default"),
                     "labels": dict(tmeta.get("labels") or {}),
                     "annotations": {**(tmeta.get("annotations") or {}),
                                     SCHEDULED_ANNOTATION: iso(scheduled)},
                     "ownerReferences": [podutil.owner_reference(cj)]},
        "spec": dict(jt.get("spec") or {}),
    }


def _ref(job: Mapping[str, Any]) -> dict:
    m = job["metadata"]
    return {"kind": "Job", "apiVersion": "batch/v1", "name": m["name"], "namespace": m.get("namespace"),
            "uid": m.get("uid"), "resourceVersion": m.get("resourceVersion")}


@dataclasses.dataclass
class Plan:
    create: dict | None = None  # the Job to create
    scheduled: dt.datetime | None = None
    delete_active: list[Mapping[str, Any]] = dataclasses.field(default_factory=list)  # Replace
    delete_history: list[Mapping[str, Any]] = dataclasses.field(default_factory=list)
    status: dict = dataclasses.field(default_factory=dict)
    events: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    requeue_after: float | None = None


def _start(job: Mapping[str, Any]) -> str:
    return ((job.get("status") or {}).get("startTime") or (job.get("metadata") or {}).get("creationTimestamp")
            or "")


def plan(cj: Mapping[str, Any], owned_jobs: Iterable[Mapping[str, Any]], now: dt.datetime) -> Plan:
    spec = cj.get("spec") or {}
    old = cj.get("status") or {}
    owned = [j for j in owned_jobs if not podutil.is_terminating(j)]
    out = Plan()
    active = [j for j in owned if jobs.finished_condition(j) is None]
    finished = [j for j in owned if jobs.finished_condition(j) is not None]
    was_active = {r.get("uid") for r in old.get("active") or []}
    st: dict[str, Any] = {}
    if old.get("lastScheduleTime"):
        st["lastScheduleTime"] = old["lastScheduleTime"]
    last_ok = podutil.parse_time(old.get("lastSuccessfulTime"))
    for j in finished:
        cond = jobs.finished_condition(j) or {}
        if j["metadata"].get("uid") in was_active:
            out.events.append(("Normal", "SawCompletedJob",
                               f"Saw completed job: {j['metadata']['name']}, status: {cond.get('type')}"))
        if cond.get("type") == "Complete":
            t = podutil.parse_time((j.get("status") or {}).get("completionTime"))
            if t and (last_ok is None or t > last_ok):
                last_ok = t
    if last_ok:
        st["lastSuccessfulTime"] = iso(last_ok)
    for kind, limit in (("Complete", spec.get("successfulJobsHistoryLimit", 3)),
                        ("Failed", spec.get("failedJobsHistoryLimit", 1))):
        if limit is None:
            continue
        done = sorted((j for j in finished if (jobs.finished_condition(j) or {}).get("type") == kind),
                      key=_start)
        out.delete_history += done[:max(len(done) - int(limit), 0)]

    try:
        expr, tz = parse_schedule(spec.get("schedule", ""), spec.get("timeZone"))
    except InvalidSchedule as e:
        out.events.append(("Warning", "UnparseableSchedule", str(e)))
        st["active"] = [_ref(j) for j in active]
        out.status = st
        return out
    if not spec.get("suspend"):
        earliest = (podutil.parse_time(old.get("lastScheduleTime"))
                    or podutil.parse_time(cj["metadata"].get("creationTimestamp")) or now)
        deadline = spec.get("startingDeadlineSeconds")
        if deadline is not None:
            earliest = max(earliest, now - dt.timedelta(seconds=float(deadline)))
        scheduled, count, nxt = missed_times(expr, tz, earliest, now)
        out.requeue_after = max((nxt - now).total_seconds(), 0.0) + 0.01
        if count > MAX_MISSED:
            out.events.append(("Warning", "TooManyMissedTimes",
                               "too many missed start times; set or decrease .spec.startingDeadlineSeconds"))
        if scheduled is not None:
            policy = spec.get("concurrencyPolicy", "Allow")
            if policy == "Forbid" and active:
                out.events.append(("Normal", "JobAlreadyActive",
                                   "Not starting job because prior execution is running and "
                                   "concurrency policy is Forbid"))
                if deadline is not None:  # look again while the start is still allowed
                    out.requeue_after = min(out.requeue_after, 1.0)
            else:
                if policy == "Replace":
                    out.delete_active = list(active)
                    active = []
                out.create = job_from_template(cj, scheduled)
                out.scheduled = scheduled
                st["lastScheduleTime"] = iso(scheduled)
    st["active"] = [_ref(j) for j in active]
    out.status = st
    return out

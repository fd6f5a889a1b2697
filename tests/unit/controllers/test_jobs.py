"""Job and CronJob decisions with the time passed in."""

from __future__ import annotations

import datetime as dt

import pytest

from nodeagent.controllers import cronjob as cj
from nodeagent.controllers import job as j

T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


def at(s: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=s)


def job(**spec):
    base = {"parallelism": 1, "completions": 1, "backoffLimit": 6}
    base.update(spec)
    return {"kind": "Job", "apiVersion": "batch/v1",
            "metadata": {"name": "pi", "namespace": "d", "uid": "ju"}, "spec": base, "status": {}}


def pod(phase="Running", finished=None, ready=False):
    p = {"metadata": {"name": f"p-{phase}", "creationTimestamp": j.iso(T0)}, "spec": {},
         "status": {"phase": phase}}
    if finished is not None:
        p["status"]["containerStatuses"] = [{"state": {"terminated": {"finishedAt": j.iso(finished)}}}]
    if ready:
        p["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return p


def test_job_runs_parallelism_up_to_remaining_completions():
    p = j.plan(job(parallelism=3, completions=5), [], T0)
    assert p.create == 3 and p.status["startTime"] == j.iso(T0) and not p.finished
    p = j.plan(job(parallelism=3, completions=5), [pod("Succeeded")] * 3 + [pod()], T0)
    assert p.create == 1  # 2 remaining completions, one already active
    p = j.plan(job(parallelism=3, completions=5), [pod("Succeeded")] * 5, at(5))
    assert p.finished == "Complete" and p.status["completionTime"] == j.iso(at(5))
    assert p.status["conditions"][-1]["type"] == "Complete"
    # work-queue job (no completions): done when one succeeded and none is active
    wq = job(parallelism=2, completions=None)
    assert j.plan(wq, [], T0).create == 2
    assert j.plan(wq, [pod("Succeeded"), pod()], T0).finished is None
    assert j.plan(wq, [pod("Succeeded"), pod("Succeeded")], T0).finished == "Complete"


def test_job_backoff_is_exponential_and_limit_fails_it():
    assert [j.backoff_delay(n, 10, 360) for n in range(6)] == [0, 10, 20, 40, 80, 160]
    assert j.backoff_delay(10, 10, 360) == 360
    spec = job(backoffLimit=2)
    fails = [pod("Failed", finished=T0)]
    p = j.plan(spec, fails, at(5))
    assert p.create == 0 and p.requeue_after == pytest.approx(5)
    assert j.plan(spec, fails, at(10)).create == 1
    two = [pod("Failed", finished=T0), pod("Failed", finished=at(1))]
    assert j.plan(spec, two, at(15)).create == 0 and j.plan(spec, two, at(21)).create == 1
    p = j.plan(spec, two + [pod("Failed", finished=at(30)), pod()], at(31))
    assert p.finished == "Failed" and p.reason == "BackoffLimitExceeded" and len(p.delete) == 1


def test_job_active_deadline_and_ttl():
    spec = job(activeDeadlineSeconds=30)
    spec["status"] = {"startTime": j.iso(T0)}
    p = j.plan(spec, [pod()], at(10))
    assert p.finished is None and p.requeue_after == pytest.approx(20)
    p = j.plan(spec, [pod()], at(30))
    assert p.finished == "Failed" and p.reason == "DeadlineExceeded" and len(p.delete) == 1
    done = job(ttlSecondsAfterFinished=100)
    assert j.ttl_left(done, at(0)) is None
    done["status"] = {"completionTime": j.iso(T0),
                      "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": j.iso(T0)}]}
    assert j.ttl_left(done, at(40)) == pytest.approx(60)
    left = j.ttl_left(done, at(100))
    assert left is not None and left <= 0


def cron(schedule="*/5 * * * *", **spec):
    return {"kind": "CronJob", "apiVersion": "batch/v1",
            "metadata": {"name": "c", "namespace": "d", "uid": "cu", "creationTimestamp": j.iso(T0)},
            "spec": {"schedule": schedule, "concurrencyPolicy": "Allow", "successfulJobsHistoryLimit": 3,
                     "failedJobsHistoryLimit": 1, "jobTemplate": {"spec": {"template": {}}}, **spec},
            "status": {}}


def child(name, state=None, start=T0, uid=None):
    o = {"metadata": {"name": name, "uid": uid or name, "creationTimestamp": j.iso(start)},
         "status": {"startTime": j.iso(start)}}
    if state:
        o["status"]["conditions"] = [{"type": state, "status": "True"}]
        if state == "Complete":
            o["status"]["completionTime"] = j.iso(start + dt.timedelta(seconds=10))
    return o


def test_schedule_parsing():
    assert cj.parse_schedule("@hourly")[0] == "@hourly"
    assert str(cj.parse_schedule("TZ=Europe/Paris 0 9 * * *")[1]) == "Europe/Paris"
    for bad in ("not a schedule", "61 * * * *", "TZ=Nowhere/Land * * * * *"):
        with pytest.raises(cj.InvalidSchedule):
            cj.parse_schedule(bad)


def test_cronjob_starts_the_most_recent_missed_time_once():
    c = cron()
    p = cj.plan(c, [], at(60))
    assert p.create is None and p.requeue_after == pytest.approx(240.01)
    p = cj.plan(c, [], at(60 * 17))  # missed 12:05, 12:10, 12:15: one job for 12:15
    assert p.scheduled == at(900) and p.create and p.create["metadata"]["name"] == cj.job_name("c", at(900))
    assert p.status["lastScheduleTime"] == j.iso(at(900))
    assert p.create["metadata"]["annotations"][cj.SCHEDULED_ANNOTATION] == j.iso(at(900))
    c["status"] = {"lastScheduleTime": j.iso(at(900))}
    assert cj.plan(c, [], at(60 * 17)).create is None
    assert cj.plan({**c, "spec": {**c["spec"], "suspend": True}}, [], at(3600)).create is None


def test_cronjob_starting_deadline_and_concurrency_policies():
    c = cron(startingDeadlineSeconds=60)
    assert cj.plan(c, [], at(300 + 61)).create is None  # the 12:05 start is more than 60 s late
    assert cj.plan(c, [], at(300 + 59)).create is not None
    running = child("old")
    forbid = cron(concurrencyPolicy="Forbid")
    p = cj.plan(forbid, [running], at(300))
    assert p.create is None and p.events[0][1] == "JobAlreadyActive"
    p = cj.plan(cron(concurrencyPolicy="Replace"), [running], at(300))
    assert p.create is not None and p.delete_active == [running] and p.status["active"] == []
    p = cj.plan(cron(), [running], at(300))
    assert p.create is not None and not p.delete_active and len(p.status["active"]) == 1


def test_cronjob_history_limits_and_saw_completed():
    c = cron()
    c["status"] = {"active": [{"uid": "ok3"}], "lastScheduleTime": j.iso(at(0))}
    kids = [child(f"ok{i}", "Complete", at(i * 300)) for i in range(4)] + \
           [child(f"bad{i}", "Failed", at(i * 300)) for i in range(2)]
    p = cj.plan(c, kids, at(1))
    assert sorted(x["metadata"]["name"] for x in p.delete_history) == ["bad0", "ok0"]
    assert ("Normal", "SawCompletedJob", "Saw completed job: ok3, status: Complete") in p.events
    assert p.status["lastSuccessfulTime"] == j.iso(at(900 + 10))


def ipod(index, phase="Running", ts="2026-01-01T00:00:00Z"):
    return {"metadata": {"name": f"p{index}-{phase}", "creationTimestamp": ts,
                         "annotations": {j.INDEX_KEY: str(index)}}, "spec": {}, "status": {"phase": phase}}


def test_indexed_job_runs_each_index_once_lowest_first():
    spec = job(parallelism=2, completions=5, completionMode="Indexed")
    p = j.plan(spec, [], T0)
    assert p.create_indexes == [0, 1] and p.create == 0
    p = j.plan(spec, [ipod(0, "Succeeded"), ipod(1), ipod(3, "Succeeded")], T0)
    assert p.create_indexes == [2] and p.status["completedIndexes"] == "0,3" and p.status["succeeded"] == 2
    p = j.plan(spec, [ipod(1), ipod(1, ts="2026-01-01T00:00:09Z"), ipod(0, "Succeeded")], T0)
    assert [x["metadata"]["name"] for x in p.delete] == ["p1-Running"] and len(p.delete) == 1
    p = j.plan(spec, [ipod(i, "Succeeded") for i in range(5)], T0)
    assert p.finished == "Complete" and p.status["completedIndexes"] == "0-4"
    assert j.format_indexes([5, 1, 2, 3, 7, 8]) == "1-3,5,7-8"


def test_indexed_pod_carries_its_index():
    pod = {"metadata": {"labels": {}},
           "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]}}
    out = j.indexed_pod(pod, "work", 3)
    assert out["metadata"]["generateName"] == "work-3-" and out["spec"]["hostname"] == "work-3"
    assert out["metadata"]["annotations"][j.INDEX_KEY] == "3"
    assert out["metadata"]["labels"][j.INDEX_KEY] == "3"
    assert out["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"},
                                                   {"name": "JOB_COMPLETION_INDEX", "value": "3"}]

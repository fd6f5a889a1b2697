"""Job and CronJob against a real apiserver; the test plays the kubelet by finishing pods."""

from __future__ import annotations

import datetime as dt

import pytest

from nodeagent.client.rest import ClientError
from nodeagent.clock import RealClock
from nodeagent.controllers.options import ControllerOptions
from tests.harness.waiting import eventually
from tests.integration.controllers.conftest import cluster_env

pytestmark = pytest.mark.slow


class Wall(RealClock):
    """Real time, with a wall clock (`now()`) plus an offset the test moves forward."""

    offset: float = 0.0

    def now(self) -> float:
        return super().now() + self.offset


def job_body(name, ns, **spec):
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "localhost/busybox:latest", "command": ["true"]}]}}, **spec}}


async def job_pods(client, ns, job):
    items = (await client.list("pods", ns, label_selector=f"job-name={job}"))["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


async def finish(client, pod, phase):
    pod = await client.get("pods", pod["metadata"]["name"], pod["metadata"]["namespace"])
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod["status"] = {**(pod.get("status") or {}), "phase": phase, "containerStatuses": [
        {"name": "c", "ready": False, "restartCount": 0, "image": "x",
         "state": {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1, "finishedAt": now}}}]}
    await client.update_status("pods", pod)


async def condition(client, ns, name):
    try:
        j = await client.get("jobs", name, ns)
    except ClientError as e:
        return "gone" if e.not_found else None
    for c in (j.get("status") or {}).get("conditions") or []:
        if c.get("status") == "True":
            return c["type"]
    return None


async def test_job_parallelism_completions_and_replacement(server):
    async with cluster_env(server) as env:
        client, ns = env.client, env.ns
        await client.create("jobs", job_body("work", ns, parallelism=2, completions=3), ns)
        pods = await eventually(lambda: _n(client, ns, "work", 2, phase="Running"))
        deleted = pods[0]["metadata"]["name"]
        await client.delete("pods", deleted, ns, grace_period=0)  # someone deletes a pod: it is replaced

        async def replaced():
            ps = await _n(client, ns, "work", 2, phase="Running")
            return ps if ps and deleted not in {p["metadata"]["name"] for p in ps} else None
        pods = await eventually(replaced)
        for p in pods:
            await finish(client, p, "Succeeded")
        # one more completion needed: exactly one new pod
        last = await eventually(lambda: _n(client, ns, "work", 1, phase="Running"))
        await finish(client, last[0], "Succeeded")
        assert await eventually(lambda: condition(client, ns, "work")) == "Complete"
        st = (await client.get("jobs", "work", ns))["status"]
        assert st["succeeded"] == 3 and st["active"] == 0 and st.get("completionTime")
        reasons = [e["reason"] for e in (await client.list("events", ns))["items"]
                   if e["involvedObject"]["name"] == "work"]
        assert "Completed" in reasons and "SuccessfulCreate" in reasons


async def test_job_backoff_limit_fails_and_ttl_deletes(server):
    opts = ControllerOptions(job_backoff_base=0.5, job_backoff_max=2)
    async with cluster_env(server, opts) as env:
        client, ns = env.client, env.ns
        await client.create("jobs", job_body("flaky", ns, backoffLimit=1, ttlSecondsAfterFinished=2), ns)
        for _ in range(2):
            pod = (await eventually(lambda: _n(client, ns, "flaky", 1, phase="Running")))[0]
            await finish(client, pod, "Failed")
        assert await eventually(lambda: condition(client, ns, "flaky")) == "Failed"
        j = await client.get("jobs", "flaky", ns)
        failed = next(c for c in j["status"]["conditions"] if c["type"] == "Failed")
        assert failed["reason"] == "BackoffLimitExceeded" and j["status"]["failed"] == 2
        async def gone():
            return await condition(client, ns, "flaky") == "gone"
        await eventually(gone, within=20)  # ttlSecondsAfterFinished


async def test_job_active_deadline(server):
    async with cluster_env(server) as env:
        client, ns = env.client, env.ns
        await client.create("jobs", job_body("slow", ns, activeDeadlineSeconds=2), ns)
        await eventually(lambda: _n(client, ns, "slow", 1, phase="Running"))
        assert await eventually(lambda: condition(client, ns, "slow")) == "Failed"
        async def no_pods():
            return await _n(client, ns, "slow", 0) == []
        await eventually(no_pods)


async def test_cronjob_schedule_forbid_and_history_on_a_moved_clock(server):
    wall = Wall()
    opts = ControllerOptions(clock=wall, cronjob_resync=0.2)
    async with cluster_env(server, opts) as env:
        client, ns = env.client, env.ns
        cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick", "namespace": ns},
                "spec": {"schedule": "*/1 * * * *", "concurrencyPolicy": "Forbid",
                         "successfulJobsHistoryLimit": 1,
                         "jobTemplate": {"spec": job_body("x", ns)["spec"]}}}
        await client.create("cronjobs", cron, ns)
        assert not (await client.list("jobs", ns))["items"]
        wall.offset += 61  # the next minute has come
        first = (await eventually(lambda: _jobs(client, ns, 1)))[0]
        assert first["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
        wall.offset += 60  # another start time while the first job still runs: Forbid skips it

        async def forbidden():
            evs = (await client.list("events", ns))["items"]
            return any(e["reason"] == "JobAlreadyActive" for e in evs)
        await eventually(forbidden)
        assert len((await client.list("jobs", ns))["items"]) == 1
        pod = (await eventually(lambda: _n(client, ns, first["metadata"]["name"], 1, phase="Running")))[0]
        await finish(client, pod, "Succeeded")
        # the first job completes; the waiting start runs now; history keeps 1 successful job
        both = await eventually(lambda: _jobs(client, ns, 2))
        second = [j for j in both if j["metadata"]["name"] != first["metadata"]["name"]]
        pod = (await eventually(lambda: _n(client, ns, second[0]["metadata"]["name"], 1, phase="Running")))[0]
        await finish(client, pod, "Succeeded")
        await eventually(lambda: _jobs(client, ns, 1, not_named=first["metadata"]["name"], complete=True))
        c = await client.get("cronjobs", "tick", ns)
        assert c["status"].get("lastScheduleTime") and c["status"].get("lastSuccessfulTime")
        reasons = {e["reason"] for e in (await client.list("events", ns))["items"]}
        assert {"SuccessfulCreate", "SawCompletedJob", "SuccessfulDelete"} <= reasons


async def _jobs(client, ns, n, not_named=None, complete=False):
    listed = (await client.list("jobs", ns))["items"]
    items = [j for j in listed if not j["metadata"].get("deletionTimestamp")]
    if not_named and any(j["metadata"]["name"] == not_named for j in items):
        return None
    if complete:
        for j in items:
            if await condition(client, ns, j["metadata"]["name"]) != "Complete":
                return None
    return items if len(items) == n else None


async def _n(client, ns, job, n, phase=None):
    pods = await job_pods(client, ns, job)
    active = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    if phase and any((p.get("status") or {}).get("phase") != phase for p in active):
        return None
    return active if len(active) == n else None


async def test_indexed_job_completes_every_index(server):
    async with cluster_env(server) as env:
        client, ns = env.client, env.ns
        await client.create("jobs",
                            job_body("idx", ns, parallelism=2, completions=3, completionMode="Indexed"), ns)
        finished: set[str] = set()
        while len(finished) < 3:
            pods = await eventually(lambda: _n(client, ns, "idx", min(2, 3 - len(finished)), phase="Running"))
            for p in pods:
                index = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                assert index not in finished and p["spec"]["hostname"] == f"idx-{index}"
                assert {"name": "JOB_COMPLETION_INDEX", "value": index} in p["spec"]["containers"][0]["env"]
                await finish(client, p, "Succeeded")
                finished.add(index)
        assert finished == {"0", "1", "2"}
        assert await eventually(lambda: condition(client, ns, "idx")) == "Complete"
        assert (await client.get("jobs", "idx", ns))["status"]["completedIndexes"] == "0-2"

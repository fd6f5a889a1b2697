"""Two scheduler replicas against one apiserver: only the Lease holder binds; the other takes over."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time

import pytest

from nodeagent.client.rest import Client
from nodeagent.scheduler.service import LEASE_NAME, elector, run_scheduler
from nodeagent.testing.apiserver import start_server
from nodeagent.testing.hollow import node_object

pytestmark = pytest.mark.slow


async def eventually(fn, within=30.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        got = await fn()
        if got:
            return got
        await asyncio.sleep(0.1)
    raise AssertionError(f"not reached in {within}s")


def pod(name):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": "100m"}}}]}}


async def test_one_leader_schedules_and_the_other_takes_over(tmp_path):
    # the server's own scheduler is left out: the two replicas here are the only ones
    srv = start_server(tmp_path / "srv", extra=["--without", "scheduler", "--controllers", "none"])
    clients = {n: Client.from_kubeconfig(srv.kubeconfig) for n in ("a", "b")}
    electors = {n: elector(c, n, lease_duration=2, renew_deadline=1.5, retry_period=0.2)
                for n, c in clients.items()}
    tasks = {n: asyncio.create_task(electors[n].run(functools.partial(run_scheduler, c)))
             for n, c in clients.items()}
    admin = clients["a"]
    try:
        await admin.create("nodes", node_object("n1", cpu="4"))
        await admin.create("pods", pod("p1"), "default")

        async def bound(name):
            return (await admin.get("pods", name, "default"))["spec"].get("nodeName") == "n1"
        await eventually(lambda: bound("p1"))
        leaders = [n for n, e in electors.items() if e.is_leader]
        assert len(leaders) == 1
        leader = leaders[0]
        other = "b" if leader == "a" else "a"
        lease = await admin.get("leases", LEASE_NAME, "kube-system")
        assert lease["spec"]["holderIdentity"] == leader

        # the leader's process dies: no release, the lease just expires
        tasks[leader].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[leader]
        await admin.create("pods", pod("p2"), "default")
        await eventually(lambda: bound("p2"))
        assert electors[other].is_leader
        lease = await admin.get("leases", LEASE_NAME, "kube-system")
        assert lease["spec"]["holderIdentity"] == other
    finally:
        for t in tasks.values():
            t.cancel()
        for t in tasks.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for c in clients.values():
            await c.close()
        assert srv.stop() == 0, srv.log()

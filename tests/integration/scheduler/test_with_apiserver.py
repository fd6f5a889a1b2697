"""The scheduler inside a real `nodeagent server`: pods bound through the API, failures reported."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from nodeagent.client.rest import Client
from nodeagent.testing.apiserver import start_server
from nodeagent.testing.hollow import HollowNodes, node_object
from tests.harness.resources import unique
from tests.harness.waiting import eventually

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("sched-apiserver"))  # with its scheduler and controllers
    yield srv
    assert srv.stop() == 0, srv.log()


def pod(ns, name, cpu="100m", **spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": cpu}}}],
                     **spec}}


async def test_pending_pods_are_bound_and_unschedulable_ones_reported(server):
    client = Client.from_kubeconfig(server.kubeconfig)
    ns = unique("sc").lower()
    names = [f"{ns}-a", f"{ns}-b"]
    hollow = HollowNodes(client, names, bind=False)
    try:
        await client.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        # Small nodes: 2 cpu each, so a 3-cpu pod fits nowhere until a bigger node joins.
        for n in names:
            await client.create("nodes", node_object(n, cpu="2", labels={"pool": ns}))
        for i in range(4):
            await client.create("pods", pod(ns, f"p{i}", nodeSelector={"pool": ns}), ns)

        async def all_bound():
            items = (await client.list("pods", ns))["items"]
            return len(items) == 4 and all(p["spec"].get("nodeName") in names for p in items) and items
        bound = await eventually(all_bound)
        assert {p["spec"]["nodeName"] for p in bound} == set(names)  # spread by LeastAllocated

        await client.create("pods", pod(ns, "big", cpu="3", nodeSelector={"pool": ns}), ns)

        async def reported():
            p = await client.get("pods", "big", ns)
            conds = {c["type"]: c for c in (p.get("status") or {}).get("conditions") or []}
            listed = (await client.list("events", ns))["items"]
            events = [e for e in listed if e["reason"] == "FailedScheduling"]
            ok = conds.get("PodScheduled", {}).get("status") == "False" and events
            return ok and (conds["PodScheduled"], events[0])
        cond, event = await eventually(reported)
        assert cond["reason"] == "Unschedulable"
        assert "Insufficient cpu" in event["message"]
        assert event["message"].startswith("0/")

        big = f"{ns}-big"
        names.append(big)
        await client.create("nodes", node_object(big, cpu="8", labels={"pool": ns}))

        async def big_bound():
            return (await client.get("pods", "big", ns))["spec"].get("nodeName") == big
        await eventually(big_bound)
    finally:
        for n in names:
            await client.delete("nodes", n)
        await client.delete("namespaces", ns)
        await hollow.remove()
        await client.close()


async def _setup_ns(client, ns):
    await client.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})


async def test_unschedulable_pod_is_bound_once_a_node_frees_up(server):
    client = Client.from_kubeconfig(server.kubeconfig)
    ns = unique("sf").lower()
    node = f"{ns}-n"
    hollow = HollowNodes(client, [node], bind=False)
    runner = asyncio.create_task(hollow.run())  # finishes graceful deletions as a kubelet would
    try:
        await _setup_ns(client, ns)
        await client.create("nodes", node_object(node, cpu="2", labels={"pool": ns}))
        await client.create("pods", pod(ns, "first", cpu="2", nodeSelector={"pool": ns}), ns)

        async def first_bound():
            return (await client.get("pods", "first", ns))["spec"].get("nodeName") == node
        await eventually(first_bound)
        await client.create("pods", pod(ns, "second", cpu="2", nodeSelector={"pool": ns}), ns)

        async def failed():
            events = [e for e in (await client.list("events", ns))["items"]
                      if e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == "second"]
            return events
        events = await eventually(failed)
        # only the pool's node passes the selector; other test nodes may exist, so check the fit reason
        assert "1 Insufficient cpu" in events[0]["message"]
        await client.delete("pods", "first", ns)

        async def second_bound():
            return (await client.get("pods", "second", ns))["spec"].get("nodeName") == node
        await eventually(second_bound)
    finally:
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await runner
        await client.delete("nodes", node)
        await client.delete("namespaces", ns)
        await client.close()


async def test_preemption_evicts_only_the_minimal_victims(server):
    client = Client.from_kubeconfig(server.kubeconfig)
    ns = unique("pe").lower()
    node = f"{ns}-n"
    classes = {f"{ns}-low": 1, f"{ns}-mid": 500, f"{ns}-high": 1000}
    hollow = HollowNodes(client, [node], bind=False)
    runner = asyncio.create_task(hollow.run())
    try:
        await _setup_ns(client, ns)
        for name, value in classes.items():
            await client.create("priorityclasses", {"apiVersion": "scheduling.k8s.io/v1",
                                                    "kind": "PriorityClass",
                                                    "metadata": {"name": name}, "value": value})
        await client.create("nodes", node_object(node, cpu="4", labels={"pool": ns}))
        # 4 cpu full: a (1 cpu, mid), b (1 cpu, low), c (2 cpu, low). A 2-cpu high pod needs 2 cpu:
        # reprieving the most important first keeps a and b; only c has to go.
        for name, cpu, cls in (("a", "1", "mid"), ("b", "1", "low"), ("c", "2", "low")):
            p = pod(ns, name, cpu=cpu, nodeSelector={"pool": ns}, priorityClassName=f"{ns}-{cls}",
                    terminationGracePeriodSeconds=0)
            await client.create("pods", p, ns)

        async def all_bound():
            items = (await client.list("pods", ns))["items"]
            return len(items) == 3 and all(p["spec"].get("nodeName") == node for p in items)
        await eventually(all_bound)
        await client.create("pods", pod(ns, "hi", cpu="2", nodeSelector={"pool": ns},
                                        priorityClassName=f"{ns}-high"), ns)

        async def hi_bound():
            return (await client.get("pods", "hi", ns))["spec"].get("nodeName") == node
        await eventually(hi_bound)
        names = sorted(p["metadata"]["name"] for p in (await client.list("pods", ns))["items"])
        assert names == ["a", "b", "hi"]
        events = (await client.list("events", ns))["items"]
        preempted = {e["involvedObject"]["name"] for e in events if e["reason"] == "Preempted"}
        assert preempted == {"c"}
    finally:
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await runner
        await client.delete("nodes", node)
        await client.delete("namespaces", ns)
        for name in classes:
            with contextlib.suppress(Exception):
                await client.delete("priorityclasses", name)
        await client.close()

"""The scheduler inside a real `nodeagent server`: pods bound through the API, failures reported."""

from __future__ import annotations

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
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
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
            events = [e for e in (await client.list("events", ns))["items"] if e["reason"] == "FailedScheduling"]
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

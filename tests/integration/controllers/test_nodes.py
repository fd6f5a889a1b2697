"""Node lifecycle, IPAM and PodGC against a real apiserver with hollow nodes that heartbeat through Leases."""

from __future__ import annotations

import ipaddress

import pytest

from nodeagent.api import taints as t
from nodeagent.client.rest import ClientError
from nodeagent.controllers.options import ControllerOptions
from tests.harness.waiting import eventually
from tests.integration.controllers.conftest import cluster_env, pods_of, template

pytestmark = pytest.mark.slow

FAST = ControllerOptions(node_monitor_period=0.3, node_monitor_grace_period=5.0, node_eviction_rate=10.0,
                         pod_gc_period=0.5, pod_gc_orphan_quarantine=1.0, cluster_cidr="10.200.0.0/16",
                         node_cidr_mask_size=24)


async def test_dead_node_is_tainted_and_its_pods_evicted_and_replaced(server):
    async with cluster_env(server, FAST, n_nodes=2, heartbeat=0.3) as env:
        client, ns = env.client, env.ns
        dying, healthy = env.nodes.names
        tol = [{"key": t.UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}]
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "ev", "namespace": ns},
              "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "ev"}},
                       "template": template("ev", tolerations=tol)}}
        await client.create("replicasets", rs, ns)

        async def spread():
            pods = await pods_of(client, ns, "ev")
            on = {p["spec"].get("nodeName") for p in pods}
            return pods if len(pods) == 4 and on == {dying, healthy} else None
        pods = await eventually(spread)
        victims = {p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == dying}

        # Healthy nodes stay untainted while they heartbeat (well past the grace period here).
        env.nodes.kill(dying)

        async def tainted():
            n = await client.get("nodes", dying)
            ready = next(c for c in n["status"]["conditions"] if c["type"] == "Ready")
            keys = {(x["key"], x["effect"]) for x in n["spec"].get("taints") or []}
            unreachable = {(t.UNREACHABLE, "NoExecute"), (t.UNREACHABLE, "NoSchedule")}
            return ready["status"] == "Unknown" and unreachable <= keys
        await eventually(tainted, within=20)
        assert not (await client.get("nodes", healthy))["spec"].get("taints")
        assert victims, "some pods should have landed on the node that dies"

        async def replaced():
            live = await pods_of(client, ns, "ev")
            names = {p["metadata"]["name"] for p in live}
            return (not names & victims and len(live) == 4
                    and all(p["spec"].get("nodeName") == healthy for p in live))
        await eventually(replaced, within=30)
        events = (await client.list("events", ns))["items"]
        evicted = {e["involvedObject"]["name"] for e in events if e["reason"] == "TaintManagerEviction"}
        assert victims <= evicted
        node_events = (await client.list("events", "default"))["items"]
        assert any(e["reason"] == "NodeNotReady" and e["involvedObject"]["name"] == dying
                   for e in node_events)


async def test_every_node_gets_its_own_pod_cidr(server):
    async with cluster_env(server, FAST, n_nodes=3) as env:
        async def assigned():
            cidrs = []
            for n in env.nodes.names:
                cidrs.append((await env.client.get("nodes", n))["spec"].get("podCIDR"))
            return cidrs if all(cidrs) else None
        cidrs = await eventually(assigned)
        nets = [ipaddress.IPv4Network(c) for c in cidrs]
        assert len(set(nets)) == 3
        assert all(n.prefixlen == 24 and n.subnet_of(ipaddress.IPv4Network("10.200.0.0/16")) for n in nets)


async def test_podgc_force_deletes_pods_of_deleted_nodes(server):
    async with cluster_env(server, FAST, n_nodes=1) as env:
        client, ns = env.client, env.ns
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray", "namespace": ns},
               "spec": {**template("stray")["spec"], "nodeName": env.nodes.names[0]}}
        await client.create("pods", pod, ns)
        keep = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pending", "namespace": ns},
                "spec": {**template("x")["spec"], "nodeSelector": {"nowhere": "true"}}}
        await client.create("pods", keep, ns)
        await eventually(lambda: _phase(client, ns, "stray", "Running"))
        await client.delete("nodes", env.nodes.names[0])

        async def gone():
            try:
                await client.get("pods", "stray", ns)
                return False
            except ClientError as e:
                return e.not_found
        await eventually(gone, within=20)
        assert (await client.get("pods", "pending", ns))["metadata"]["name"] == "pending"


async def _phase(client, ns, name, phase):
    return ((await client.get("pods", name, ns)).get("status") or {}).get("phase") == phase

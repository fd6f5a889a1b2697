"""DaemonSet against a real apiserver: one pod per eligible node, replacement, rolling update, kubectl."""

from __future__ import annotations

import asyncio

import pytest

from tests.harness.waiting import eventually
from tests.integration.controllers.conftest import cluster_env, kubectl, pods_of, template

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("version", ["1.32", "1.20"])
async def test_daemonset_one_pod_per_eligible_node_and_rollout(server, version):
    async with cluster_env(server, n_nodes=3, labels={"1": {"daemon": "yes"}, "2": {"daemon": "yes"}}) as env:
        client, ns = env.client, env.ns
        n1, n2, n3 = env.nodes.names
        ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": ns},
              "spec": {"selector": {"matchLabels": {"app": "agent"}},
                       "template": template("agent", "a:1", nodeSelector={"daemon": "yes"})}}
        await client.create("daemonsets", ds, ns)

        async def on_eligible(image="a:1"):
            pods = await pods_of(client, ns, "agent")
            placed = sorted(p["spec"].get("nodeName") or "" for p in pods)
            ok = placed == [n1, n2] and all(p["spec"]["containers"][0]["image"] == image for p in pods)
            return pods if ok else None
        pods = await eventually(on_eligible)
        for p in pods:  # pinned to its node by affinity, bound by the scheduler (here the hollow binder)
            terms = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [p["spec"]["nodeName"]]

        def run(*args, **kw):
            return asyncio.to_thread(kubectl, version, server, *args, **kw)
        out = (await run("-n", ns, "rollout", "status", "daemonset/agent", "--timeout=60s")).stdout
        assert "successfully rolled out" in out

        victim = pods[0]["metadata"]["name"]
        await client.delete("pods", victim, ns, grace_period=0)

        async def replaced():
            pods = await on_eligible()
            return pods and victim not in {p["metadata"]["name"] for p in pods}
        await eventually(replaced)

        # a third node becomes eligible: it gets a pod
        await client.patch("nodes", n3, {"metadata": {"labels": {"daemon": "yes"}}})
        await eventually(lambda: _count(client, ns, 3))

        await run("-n", ns, "set", "image", "daemonset/agent", "c=a:2")
        out = (await run("-n", ns, "rollout", "status", "daemonset/agent", "--timeout=60s")).stdout
        assert "successfully rolled out" in out
        pods = await pods_of(client, ns, "agent")
        assert sorted(p["spec"]["nodeName"] for p in pods) == sorted([n1, n2, n3])
        assert {p["spec"]["containers"][0]["image"] for p in pods} == {"a:2"}
        st = (await client.get("daemonsets", "agent", ns))["status"]
        assert st["desiredNumberScheduled"] == 3
        assert st["updatedNumberScheduled"] == 3 and st["numberReady"] == 3
        hist = (await run("-n", ns, "rollout", "history", "daemonset/agent")).stdout
        assert [ln.split()[0] for ln in hist.splitlines() if ln[:1].isdigit()] == ["1", "2"], hist
        await run("-n", ns, "rollout", "undo", "daemonset/agent")
        out = (await run("-n", ns, "rollout", "status", "daemonset/agent", "--timeout=60s")).stdout
        assert "successfully rolled out" in out

        async def back():
            pods = await pods_of(client, ns, "agent")
            return len(pods) == 3 and {p["spec"]["containers"][0]["image"] for p in pods} == {"a:1"}
        await eventually(back)
        crs = [c for c in (await client.list("controllerrevisions", ns))["items"]]
        assert sorted(c["revision"] for c in crs) == [2, 3]  # the first template came back as revision 3
        reasons = {e["reason"] for e in (await client.list("events", ns))["items"]
                   if e["involvedObject"]["name"] == "agent"}
        assert {"SuccessfulCreate", "SuccessfulDelete"} <= reasons


async def _count(client, ns, n):
    pods = await pods_of(client, ns, "agent")
    return len([p for p in pods if p["spec"].get("nodeName")]) == n

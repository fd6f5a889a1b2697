"""PodDisruptionBudgets against a real apiserver: the disruption controller's status, and kubectl drain
blocked by a budget through pods/eviction, then allowed once the budget permits."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.controllers.options import ControllerOptions
from tests.harness.waiting import eventually
from tests.integration.controllers.conftest import cluster_env, kubectl, pods_of, template

pytestmark = pytest.mark.slow


async def _status(client, ns, want):
    st = (await client.get("poddisruptionbudgets", "web", ns)).get("status") or {}
    return st if all(st.get(k) == v for k, v in want.items()) else None


@pytest.mark.parametrize("version", ["1.32", "1.20"])
async def test_drain_blocked_by_budget_then_allowed(server, version):
    async with cluster_env(server, ControllerOptions(), n_nodes=2) as env:
        client, ns = env.client, env.ns
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web", "namespace": ns},
              "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                       "template": template("web")}}
        await client.create("replicasets", rs, ns)

        async def running():
            pods = await pods_of(client, ns, "web")
            return pods if len(pods) == 2 and all(
                (p.get("status") or {}).get("phase") == "Running" for p in pods) else None
        pods = await eventually(running)
        node = pods[0]["spec"]["nodeName"]
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "web", "namespace": ns},
               "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}
        await client.create("poddisruptionbudgets", pdb, ns)
        st = await eventually(lambda: _status(client, ns, {"currentHealthy": 2, "desiredHealthy": 2,
                                                          "expectedPods": 2, "disruptionsAllowed": 0,
                                                          "observedGeneration": 1}))
        cond = st["conditions"][0]
        assert (cond["type"], cond["status"], cond["reason"]) == ("DisruptionAllowed", "False",
                                                                  "InsufficientPods")

        def drain(timeout):
            return asyncio.to_thread(kubectl, version, server, "drain", node, "--ignore-daemonsets",
                                     "--delete-emptydir-data", f"--timeout={timeout}", check=False)
        blocked = await drain("7s")
        assert blocked.returncode != 0
        assert "Cannot evict pod as it would violate the pod's disruption budget." in blocked.stderr
        assert len(await pods_of(client, ns, "web")) == 2

        await client.patch("poddisruptionbudgets", "web", {"spec": {"minAvailable": 1}}, ns)
        st = await eventually(lambda: _status(client, ns, {"desiredHealthy": 1, "disruptionsAllowed": 1,
                                                          "observedGeneration": 2}))
        assert st["conditions"][0]["reason"] == "SufficientPods"
        allowed = await drain("60s")
        assert allowed.returncode == 0, allowed.stderr
        assert "evicted" in allowed.stdout
        events = (await client.list("events", ns))["items"]
        assert not any(e["reason"] == "FailedCreate" for e in events)
        await asyncio.to_thread(kubectl, version, server, "uncordon", node)

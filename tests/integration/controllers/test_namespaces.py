"""The default ServiceAccount and ResourceQuota status against a real apiserver."""

from __future__ import annotations

import pytest

from nodeagent.client.rest import ClientError
from tests.harness.waiting import eventually
from tests.integration.controllers.conftest import cluster_env, template

pytestmark = pytest.mark.slow


async def test_default_service_account_comes_back(server):
    async with cluster_env(server, n_nodes=1) as env:
        client, ns = env.client, env.ns
        first = await eventually(lambda: _sa(client, ns))
        await client.delete("serviceaccounts", "default", ns)

        async def recreated():
            sa = await _sa(client, ns)
            return sa and sa["metadata"]["uid"] != first["metadata"]["uid"]
        await eventually(recreated)


async def _sa(client, ns):
    try:
        return await client.get("serviceaccounts", "default", ns)
    except ClientError as e:
        if e.not_found:
            return None
        raise


async def test_quota_used_follows_deletes(server):
    async with cluster_env(server, n_nodes=1) as env:
        client, ns = env.client, env.ns
        q = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": ns},
             "spec": {"hard": {"pods": "5", "configmaps": "10"}}}
        await client.create("resourcequotas", q, ns)
        for i in range(3):
            await client.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"},
                                         "spec": template("q")["spec"]}, ns)

        async def used(pods):
            st = (await client.get("resourcequotas", "q", ns)).get("status") or {}
            hard, counts = st.get("hard"), st.get("used") or {}
            return hard == {"pods": "5", "configmaps": "10"} and counts.get("pods") == pods
        await eventually(lambda: used("3"))
        await client.delete("pods", "p0", ns, grace_period=0)
        await client.delete("pods", "p1", ns, grace_period=0)
        await eventually(lambda: used("1"))
        n_cm = len((await client.list("configmaps", ns))["items"])
        assert (await client.get("resourcequotas", "q", ns))["status"]["used"]["configmaps"] == str(n_cm)

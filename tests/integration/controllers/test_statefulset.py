"""StatefulSet against a real apiserver: ordered stable pods, replacement, partitioned rollout, kubectl."""

from __future__ import annotations

import asyncio

import pytest

from tests.harness.waiting import eventually
from tests.integration.controllers.conftest import cluster_env, kubectl, template

pytestmark = pytest.mark.slow


async def sts_pods(client, ns):
    items = (await client.list("pods", ns, label_selector="app=web"))["items"]
    return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}


def DONE(out: str) -> bool:
    return "partitioned roll out complete: 3 new pods" in out or "rolling update complete 3 pods" in out


def image(p):
    return p["spec"]["containers"][0]["image"]


@pytest.mark.parametrize("version", ["1.32", "1.20"])
async def test_statefulset_ordered_stable_and_partitioned_rollout(server, version):
    async with cluster_env(server) as env:
        client, ns = env.client, env.ns

        def run(*args, **kw):
            return asyncio.to_thread(kubectl, version, server, *args, **kw)
        sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "namespace": ns},
               "spec": {"replicas": 3, "serviceName": "nginx", "selector": {"matchLabels": {"app": "web"}},
                        "template": template("web", "nginx:1.14.2"),
                        "volumeClaimTemplates": [{"metadata": {"name": "www"}, "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}}}}]}}
        await client.create("statefulsets", sts, ns)

        async def three_ready():
            pods = await sts_pods(client, ns)
            ok = sorted(pods) == ["web-0", "web-1", "web-2"] and all(
                (p.get("status") or {}).get("phase") == "Running" for p in pods.values())
            return pods if ok else None
        pods = await eventually(three_ready)
        for name, p in pods.items():
            assert p["spec"]["hostname"] == name and p["spec"]["subdomain"] == "nginx"
            claim = {"name": "www", "persistentVolumeClaim": {"claimName": f"www-{name}"}}
            assert claim in p["spec"]["volumes"]
        listed = (await client.list("persistentvolumeclaims", ns))["items"]
        claims = sorted(c["metadata"]["name"] for c in listed)
        assert claims == ["www-web-0", "www-web-1", "www-web-2"]
        events = sorted((e for e in (await client.list("events", ns))["items"]
                         if e["involvedObject"]["name"] == "web" and e["reason"] == "SuccessfulCreate"),
                        key=lambda e: e["metadata"]["name"])  # names carry a nanosecond stamp
        msgs = [e["message"] for e in events]
        assert [m for m in msgs if m.startswith("Created pod")] == [f"Created pod: web-{i}" for i in range(3)]
        assert [m.split()[2] for m in msgs if m.startswith("create Claim")] == [
            f"www-web-{i}" for i in range(3)]
        out = (await run("-n", ns, "rollout", "status", "statefulset/web", "--timeout=60s")).stdout
        assert DONE(out), out  # kubectl says "partitioned roll out complete" whenever rollingUpdate is set

        old_uid = pods["web-1"]["metadata"]["uid"]
        await client.delete("pods", "web-1", ns, grace_period=0)

        async def same_name_back():
            p = (await sts_pods(client, ns)).get("web-1")
            return p and p["metadata"]["uid"] != old_uid and (p.get("status") or {}).get("phase") == "Running"
        await eventually(same_name_back)

        # the partition example: only ordinals >= 2 get the new template
        await client.patch("statefulsets", "web", {"spec": {
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}},
            "template": template("web", "nginx:1.16.1")}}, ns)
        out = (await run("-n", ns, "rollout", "status", "statefulset/web", "--timeout=60s")).stdout
        assert "partitioned roll out complete: 1 new pods have been updated" in out, out

        async def partitioned():
            pods = await sts_pods(client, ns)
            imgs = {n: image(p) for n, p in pods.items()}
            return imgs == {"web-0": "nginx:1.14.2", "web-1": "nginx:1.14.2", "web-2": "nginx:1.16.1"}
        await eventually(partitioned)
        st = (await client.get("statefulsets", "web", ns))["status"]
        assert st["updatedReplicas"] == 1 and st["currentRevision"] != st["updateRevision"]

        await client.patch("statefulsets", "web",
                           {"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}, ns)
        out = (await run("-n", ns, "rollout", "status", "statefulset/web", "--timeout=60s")).stdout
        assert DONE(out), out  # kubectl says "partitioned roll out complete" whenever rollingUpdate is set
        assert {image(p) for p in (await sts_pods(client, ns)).values()} == {"nginx:1.16.1"}

        hist = (await run("-n", ns, "rollout", "history", "statefulset/web")).stdout
        assert [ln.split()[0] for ln in hist.splitlines() if ln[:1].isdigit()] == ["1", "2"], hist
        await run("-n", ns, "rollout", "undo", "statefulset/web")
        out = (await run("-n", ns, "rollout", "status", "statefulset/web", "--timeout=60s")).stdout
        assert DONE(out), out

        async def undone():
            pods = await sts_pods(client, ns)
            return len(pods) == 3 and {image(p) for p in pods.values()} == {"nginx:1.14.2"}
        await eventually(undone)

        await run("-n", ns, "scale", "statefulset/web", "--replicas=1")

        async def scaled_down():
            return sorted(await sts_pods(client, ns)) == ["web-0"]
        await eventually(scaled_down)

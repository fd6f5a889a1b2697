"""A scheduler extender configured through `nodeagent server --scheduler-config`: the embedded scheduler
asks a small extender server in the test to filter, prioritize and bind over HTTP."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from aiohttp import web

from nodeagent.client.rest import Client
from nodeagent.testing.apiserver import start_server
from nodeagent.testing.hollow import HollowNodes, node_object
from tests.harness.resources import unique
from tests.harness.waiting import eventually

pytestmark = pytest.mark.slow


async def test_extender_filters_prioritizes_and_binds(tmp_path):
    ns = unique("ext").lower()
    names = [f"{ns}-a", f"{ns}-b", f"{ns}-c"]
    calls: list[tuple[str, Any]] = []
    client_box: list[Client] = []

    async def filter_(request: web.Request) -> web.Response:
        args = await request.json()
        calls.append(("filter", args))
        keep = [n for n in args["NodeNames"] if n != names[0]]
        return web.json_response({"NodeNames": keep, "FailedNodes": {names[0]: "reserved for batch"}})

    async def prioritize(request: web.Request) -> web.Response:
        args = await request.json()
        calls.append(("prioritize", args))
        scores = [{"Host": n, "Score": 10 if n == names[2] else 0} for n in args["NodeNames"]]
        return web.json_response(scores)

    async def bind(request: web.Request) -> web.Response:
        args = await request.json()
        calls.append(("bind", args))
        await client_box[0].bind(args["PodNamespace"], args["PodName"], args["Node"])
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/ext/filter", filter_)
    app.router.add_post("/ext/prioritize", prioritize)
    app.router.add_post("/ext/bind", bind)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    cfg = tmp_path / "scheduler.yaml"
    cfg.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "extenders": [{"urlPrefix": f"http://127.0.0.1:{port}/ext", "filterVerb": "filter",
                       "prioritizeVerb": "prioritize", "bindVerb": "bind", "weight": 10,
                       "nodeCacheCapable": True, "httpTimeout": "10s"}]}))
    srv = start_server(tmp_path / "srv", extra=["--controllers", "none", "--scheduler-config", str(cfg)])
    client = Client.from_kubeconfig(srv.kubeconfig)
    client_box.append(client)
    hollow = HollowNodes(client, names, bind=False)
    try:
        await client.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for n in names:
            await client.create("nodes", node_object(n, cpu="2", labels={"pool": ns}))
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns},
               "spec": {"nodeSelector": {"pool": ns}, "containers": [{"name": "c", "image": "busybox"}]}}
        await client.create("pods", pod, ns)

        async def bound():
            p = await client.get("pods", "p", ns)
            return p["spec"].get("nodeName")
        assert await eventually(bound) == names[2]
        verbs = [v for v, _ in calls]
        assert verbs == ["filter", "prioritize", "bind"]
        assert sorted(calls[0][1]["NodeNames"]) == sorted(names)
        assert calls[0][1]["Pod"]["metadata"]["name"] == "p"
        assert calls[2][1]["PodName"] == "p" and calls[2][1]["Node"] == names[2]
    finally:
        await hollow.remove()
        await client.close()
        await runner.cleanup()
        assert srv.stop() == 0, srv.log()

"""Scheduler extenders over real HTTP: a small extender server in the test answers filter, prioritize and
bind in kube-scheduler's extender/v1 shapes."""

from __future__ import annotations

import random
from typing import Any

import pytest
from aiohttp import web

from nodeagent.scheduler.extender import parse_duration
from nodeagent.scheduler.framework.registry import ConfigError
from nodeagent.scheduler.profile import parse_config
from nodeagent.scheduler.scheduler import Scheduler
from nodeagent.testing.clock import FakeClock
from nodeagent.testing.fake_cluster import FakeCluster, make_node, make_pod


class Extender:
    """Filters out nodes labelled ext=no (n-bad: unresolvable), prefers the node labelled ext=best."""

    def __init__(self, cluster: FakeCluster | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.cluster = cluster
        self.fail = False

    async def filter(self, request: web.Request) -> web.Response:
        args = await request.json()
        self.calls.append(("filter", args))
        if self.fail:
            return web.json_response({"Error": "extender is broken"})
        if args.get("NodeNames") is not None:
            names = args["NodeNames"]
            return web.json_response({"NodeNames": [n for n in names if n != "n1"],
                                      "FailedNodes": {"n1": "n1 is not for you"}})
        items = args["Nodes"]["items"]
        ok = [n for n in items if n["metadata"]["labels"].get("ext") != "no"]
        failed = {n["metadata"]["name"]: "labelled ext=no" for n in items if n not in ok}
        unresolvable = {k: v for k, v in failed.items() if k == "n-bad"}
        return web.json_response({"Nodes": {"metadata": {}, "items": ok}, "FailedNodes": failed,
                                  "FailedAndUnresolvableNodes": unresolvable})

    async def prioritize(self, request: web.Request) -> web.Response:
        args = await request.json()
        self.calls.append(("prioritize", args))
        names = args.get("NodeNames") or [n["metadata"]["name"] for n in args["Nodes"]["items"]]
        best = {n["metadata"]["name"] for n in (args.get("Nodes") or {}).get("items") or []
                if n["metadata"]["labels"].get("ext") == "best"} or {"n3"}
        return web.json_response([{"Host": n, "Score": 10 if n in best else 0} for n in names])

    async def preempt(self, request: web.Request) -> web.Response:
        """Agrees to preempt only on n2 (answering MetaVictims, as extenders do)."""
        args = await request.json()
        self.calls.append(("preempt", args))
        if args.get("NodeNameToMetaVictims") is not None:
            by_node = {n: [p["UID"] for p in v["Pods"]] for n, v in args["NodeNameToMetaVictims"].items()}
        else:
            victims = args["NodeNameToVictims"]
            by_node = {n: [p["metadata"]["uid"] for p in v["Pods"]] for n, v in victims.items()}
        return web.json_response({"NodeNameToMetaVictims": {
            n: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": 0}
            for n, uids in by_node.items() if n == "n2"}})

    async def bind(self, request: web.Request) -> web.Response:
        args = await request.json()
        self.calls.append(("bind", args))
        assert self.cluster is not None
        await self.cluster.bind(args["PodNamespace"], args["PodName"], args["PodUID"], args["Node"])
        return web.json_response({})


@pytest.fixture
async def extender():
    ext = Extender()
    app = web.Application()
    for verb in ("filter", "prioritize", "preempt", "bind"):
        app.router.add_post(f"/scheduler/{verb}", getattr(ext, verb))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    ext.url = f"http://127.0.0.1:{port}/scheduler"  # type: ignore[attr-defined]
    yield ext
    await runner.cleanup()


MADE: list[Scheduler] = []


@pytest.fixture(autouse=True)
async def close_schedulers():
    yield
    while MADE:
        await MADE.pop().close()


def scheduler(ext_cfg: list[dict[str, Any]],
              extender: Extender | None = None) -> tuple[Scheduler, FakeCluster]:
    cfg = parse_config({"extenders": ext_cfg})
    cluster = FakeCluster()
    s = Scheduler(cfg, cluster.api(), clock=FakeClock(), rng=random.Random(1))
    MADE.append(s)
    cluster.subscribe(s)
    if extender is not None:
        extender.cluster = cluster
    return s, cluster


def nodes(cluster: FakeCluster, **labels: dict[str, str]) -> None:
    for name in ("n1", "n2", "n3"):
        n = make_node(name)
        n["metadata"]["labels"] = {**n["metadata"].get("labels", {}), **labels.get(name, {})}
        cluster.add_node(n)


async def test_filter_and_prioritize_with_whole_nodes(extender):
    s, cluster = scheduler([{"urlPrefix": extender.url, "filterVerb": "filter",
                             "prioritizeVerb": "prioritize", "weight": 5}])
    nodes(cluster, n1={"ext": "no"}, n2={"ext": "best"})
    cluster.add_pod(make_pod("p", cpu="100m"))
    await s.drain()
    assert cluster.node_of("p") == "n2"
    verbs = [v for v, _ in extender.calls]
    assert verbs == ["filter", "prioritize"]
    args = extender.calls[0][1]
    assert args["Pod"]["metadata"]["name"] == "p" and "NodeNames" not in args
    assert sorted(n["metadata"]["name"] for n in args["Nodes"]["items"]) == ["n1", "n2", "n3"]
    assert [n["metadata"]["name"] for n in extender.calls[1][1]["Nodes"]["items"]] == ["n2", "n3"]


async def test_node_cache_capable_gets_names_and_failures_are_reported(extender):
    s, cluster = scheduler([{"urlPrefix": extender.url, "filterVerb": "filter", "nodeCacheCapable": True}])
    nodes(cluster)
    cluster.add_node(make_node("n-bad", cpu="1"))
    cluster.add_pod(make_pod("p", cpu="100m", nodeSelector={"kubernetes.io/hostname": "n1"}))
    await s.drain()
    assert cluster.node_of("p") is None
    assert sorted(extender.calls[0][1]["NodeNames"]) == ["n1"]
    msg = cluster.events_for("p", "FailedScheduling")[0]["message"]
    assert "n1 is not for you" in msg


async def test_managed_resources_pick_the_pods_and_are_ignored_by_fit(extender):
    s, cluster = scheduler([{"urlPrefix": extender.url, "filterVerb": "filter", "managedResources": [
        {"name": "example.com/gpu", "ignoredByScheduler": True}]}])
    nodes(cluster, n1={"ext": "no"}, n2={"ext": "no"})
    cluster.add_pod(make_pod("plain", cpu="100m"))
    await s.drain()
    assert extender.calls == []  # not interested: the pod asks for no managed resource
    gpu = make_pod("gpu", cpu="100m")
    gpu["spec"]["containers"][0]["resources"]["limits"] = {"example.com/gpu": "1"}
    gpu["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = "1"
    cluster.add_pod(gpu)
    await s.drain()
    assert [v for v, _ in extender.calls] == ["filter"]
    assert cluster.node_of("gpu") == "n3"  # no node has the resource, but the extender accounts for it


async def test_errors_fail_the_cycle_unless_ignorable(extender):
    extender.fail = True
    s, cluster = scheduler([{"urlPrefix": extender.url, "filterVerb": "filter"}])
    nodes(cluster)
    cluster.add_pod(make_pod("p", cpu="100m"))
    await s.drain()
    assert cluster.node_of("p") is None
    assert "extender is broken" in cluster.events_for("p", "FailedScheduling")[0]["message"]
    s2, cluster2 = scheduler([{"urlPrefix": "http://127.0.0.1:9/none", "filterVerb": "filter",
                               "ignorable": True, "httpTimeout": "2s"}])
    nodes(cluster2)
    cluster2.add_pod(make_pod("q", cpu="100m"))
    await s2.drain()
    assert cluster2.node_of("q") is not None


async def test_binder_extender_binds_instead_of_the_default_binder(extender):
    s, cluster = scheduler([{"urlPrefix": extender.url, "bindVerb": "bind"}], extender)
    nodes(cluster)
    pod = cluster.add_pod(make_pod("p", cpu="100m"))
    await s.drain()
    bind = next(a for v, a in extender.calls if v == "bind")
    assert bind == {"PodName": "p", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"],
                    "Node": cluster.node_of("p")}
    assert cluster.events_for("p", "Scheduled")


@pytest.mark.parametrize("cache_capable", [False, True])
async def test_preempt_extender_narrows_the_candidates(extender, cache_capable):
    s, cluster = scheduler([{"urlPrefix": extender.url, "preemptVerb": "preempt",
                             "nodeCacheCapable": cache_capable}])
    for name in ("n1", "n2", "n3"):
        cluster.add_node(make_node(name, cpu="1"))
        cluster.add_pod(make_pod(f"low-{name}", cpu="1", priority=1, node=name))
    cluster.add_pod(make_pod("hi", cpu="1", priority=100))
    await s.drain()
    (verb, args), = extender.calls
    key = "NodeNameToMetaVictims" if cache_capable else "NodeNameToVictims"
    assert verb == "preempt" and args["Pod"]["metadata"]["name"] == "hi"
    assert set(args[key]) <= {"n1", "n2", "n3"}
    assert "n2" in args[key]  # DefaultPreemption offered n2 among its candidates
    hi = cluster.pod("hi")
    assert hi["status"].get("nominatedNodeName") == "n2"
    assert [e["involvedObject"]["name"] for e in cluster.events if e["reason"] == "Preempted"] == ["low-n2"]


@pytest.mark.parametrize("ext,why", [
    ({"urlPrefix": "http://x", "prioritizeVerb": "p"}, "must have a positive weight"),
    ({"filterVerb": "f"}, "urlPrefix: Required value"),
    ({"urlPrefix": "http://x", "httpTimeout": "soon"}, "invalid duration"),
    ({"urlPrefix": "http://x", "bogus": 1}, "unknown field(s) bogus"),
])
def test_bad_extender_config_is_refused(ext, why):
    with pytest.raises(ConfigError, match=why.replace("(", r"\(").replace(")", r"\)")):
        parse_config({"extenders": [ext]})
    with pytest.raises(ConfigError, match="only one extender can implement bind"):
        parse_config({"extenders": [{"urlPrefix": "http://a", "bindVerb": "b"},
                                    {"urlPrefix": "http://b", "bindVerb": "b"}]})


def test_durations():
    assert parse_duration("1m30s", "f") == 90 and parse_duration("500ms", "f") == 0.5


async def test_https_extender_with_tls_config(tmp_path):
    """enableHTTPS with tlsConfig: the extender's certificate verified against caFile (by serverName when
    set), refused without it, accepted unverified with insecure."""
    import ssl

    from nodeagent.apiserver.pki import ensure_serving_cert

    crt, key = ensure_serving_cert(tmp_path, [])
    ext = Extender()
    app = web.Application()
    app.router.add_post("/scheduler/filter", ext.filter)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(crt, key)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    url = f"https://127.0.0.1:{runner.addresses[0][1]}/scheduler"
    ca = str(tmp_path / "ca.crt")
    try:
        cases: list[tuple[str, dict[str, Any], bool]] = [
            ("ca", {"caFile": ca}, True), ("sni", {"caFile": ca, "serverName": "kubernetes"}, True),
            ("untrusted", {}, False), ("insecure", {"insecure": True}, True)]
        for name, tls, placed in cases:
            s, cluster = scheduler([{"urlPrefix": url, "filterVerb": "filter", "enableHTTPS": True,
                                     "tlsConfig": tls, "httpTimeout": "5s"}])
            nodes(cluster, n1={"ext": "no"})
            cluster.add_pod(make_pod(name, cpu="100m"))
            await s.drain()
            assert (cluster.node_of(name) is not None) is placed, name
            if not placed:
                assert "certificate" in cluster.events_for(name, "FailedScheduling")[0]["message"].lower()
    finally:
        await runner.cleanup()

"""List and watch resourceVersion semantics on a real `nodeagent server` (SQLite), as kube-apiserver 1.32
answers them: raw HTTP for what clients rarely send, kubectl 1.20/1.32 (`get --raw`, `--chunk-size`)
and the Python client for what they do, and a WatchList stream as client-go's reflector reads it."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest

from nodeagent.testing.apiserver import start_server
from tests.integration.apiserver.http import call

NS = "rv"
CM = f"/api/v1/namespaces/{NS}/configmaps"
ROOT = "kube-root-ca.crt"


def request(server, path: str) -> tuple[int, dict[str, str], bytes]:
    ctx = ssl.create_default_context(cafile=str(server.ca_file))
    req = urllib.request.Request(server.url + path, headers={"Authorization": f"Bearer {server.token}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def names(doc: dict[str, Any]) -> list[str]:
    return [i["metadata"]["name"] for i in doc["items"]]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """No controllers: nothing but the tests and the apiserver's bootstrap writes to the namespace."""
    without = ("scheduler", "controllers", "ingress", "podnetwork")
    srv = start_server(tmp_path_factory.mktemp("listrv"), "sqlite", timeout=90,
                       extra=[f"--without={c}" for c in without])
    yield srv
    rc = srv.stop()
    assert rc == 0, srv.log()


@pytest.fixture(scope="module")
def objects(server) -> dict[str, Any]:
    """Five ConfigMaps after the namespace's kube-root-ca.crt (ROOT, last by name); `at` is the revision
    they were all written by, then c changes and d goes."""
    assert call(server, "POST", "/api/v1/namespaces", {"metadata": {"name": NS}})[0] == 201
    deadline = time.monotonic() + 30
    while call(server, "GET", f"{CM}/{ROOT}")[0] != 200:  # the apiserver's bootstrap publishes it
        assert time.monotonic() < deadline, "no kube-root-ca.crt in the new namespace"
        time.sleep(0.1)
    for n in "abcde":
        code, _ = call(server, "POST", CM, {"metadata": {"name": n}, "data": {"v": "1"}})
        assert code == 201
    code, doc = call(server, "GET", CM)
    assert code == 200 and names(doc) == [*"abcde", ROOT]
    at = doc["metadata"]["resourceVersion"]
    assert call(server, "PATCH", f"{CM}/c", {"data": {"v": "2"}},
                content_type="application/merge-patch+json")[0] == 200
    assert call(server, "DELETE", f"{CM}/d")[0] == 200
    return {"at": at}


@pytest.mark.parametrize(("query", "field", "message"), [
    ("resourceVersionMatch=NotOlderThan", "resourceVersionMatch",
     "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"),
    ("resourceVersion=0&resourceVersionMatch=Exact", "resourceVersionMatch",
     'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"'),
    ("resourceVersion=5&resourceVersionMatch=Latest", "resourceVersionMatch",
     'Unsupported value: "Latest": supported values: "Exact", "NotOlderThan", ""'),
    ("sendInitialEvents=true", "sendInitialEvents", "Forbidden: sendInitialEvents is forbidden for list"),
    ("watch=1&sendInitialEvents=true&allowWatchBookmarks=true", "resourceVersionMatch",
     "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"),
    ("watch=1&resourceVersion=5&resourceVersionMatch=NotOlderThan", "resourceVersionMatch",
     "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"),
])
def test_bad_options_are_422_as_kubes(server, objects, query, field, message):
    code, st = call(server, "GET", f"{CM}?{query}")
    assert code == 422, st
    assert (st["reason"], st["details"]["kind"], st["details"]["group"]) == ("Invalid", "ListOptions",
                                                                           "meta.k8s.io")
    assert st["details"]["causes"][0] == {"reason": st["details"]["causes"][0]["reason"], "field": field,
                                          "message": message}
    assert st["message"] == f'ListOptions.meta.k8s.io "" is invalid: {field}: {message}'


def test_a_revision_not_reached_is_504_with_retry_after(server, objects):
    _, doc = call(server, "GET", CM)
    now = int(doc["metadata"]["resourceVersion"])
    t0 = time.monotonic()
    code, headers, body = request(server, f"{CM}?resourceVersion={now + 1000}")
    st = json.loads(body)
    assert code == 504 and headers["Retry-After"] == "1", st
    assert time.monotonic() - t0 >= 2.5  # the cacher waited its 3 s for the revision first
    assert st["reason"] == "Timeout" and st["message"].startswith(
        f"Timeout: Too large resource version: {now + 1000}, current: ")
    assert st["details"]["causes"] == [{"reason": "ResourceVersionTooLarge",
                                        "message": "Too large resource version"}]


def test_exact_reads_the_past_and_not_older_than_the_present(server, objects, kubectl):
    at = objects["at"]
    doc = json.loads(kubectl("get", "--raw", f"{CM}?resourceVersion={at}&resourceVersionMatch=Exact"))
    assert names(doc) == [*"abcde", ROOT] and doc["metadata"]["resourceVersion"] == at
    assert next(i for i in doc["items"] if i["metadata"]["name"] == "c")["data"] == {"v": "1"}
    doc = json.loads(kubectl("get", "--raw", f"{CM}?resourceVersion={at}&resourceVersionMatch=NotOlderThan"))
    assert names(doc) == [*"abce", ROOT] and int(doc["metadata"]["resourceVersion"]) > int(at)
    doc = json.loads(kubectl("get", "--raw", f"{CM}?resourceVersion=0&limit=1"))  # "0": the limit is ignored
    assert names(doc) == [*"abce", ROOT] and "continue" not in doc["metadata"]


def test_pages_hold_the_first_pages_revision(server, objects, kubectl):
    first = json.loads(kubectl("get", "--raw", f"{CM}?limit=2"))
    assert names(first) == ["a", "b"] and first["metadata"]["remainingItemCount"] == 3
    assert call(server, "POST", CM, {"metadata": {"name": "bb"}})[0] == 201  # lands in the next page's range
    token = urllib.parse.quote(first["metadata"]["continue"])
    second = json.loads(kubectl("get", "--raw", f"{CM}?limit=2&continue={token}"))
    assert names(second) == ["c", "e"] and second["metadata"]["resourceVersion"] == \
        first["metadata"]["resourceVersion"]
    # kubectl pages with its own --chunk-size and follows the tokens to the end
    out = kubectl("get", "configmaps", "-n", NS, "--chunk-size=1", "-o", "name")
    assert out.split() == [f"configmap/{n}" for n in ("a", "b", "bb", "c", "e", ROOT)]
    assert call(server, "DELETE", f"{CM}/bb")[0] == 200


def test_python_client_lists_exact(server, objects):
    kubernetes = pytest.importorskip("kubernetes")
    cfg = kubernetes.client.Configuration()
    cfg.host, cfg.ssl_ca_cert = server.url, str(server.ca_file)
    cfg.api_key = {"authorization": f"Bearer {server.token}"}
    core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(cfg))
    got = core.list_namespaced_config_map(NS, resource_version=objects["at"], resource_version_match="Exact")
    assert [i.metadata.name for i in got.items] == [*"abcde", ROOT]
    with pytest.raises(kubernetes.client.ApiException) as e:
        core.list_namespaced_config_map(NS, resource_version_match="Exact")
    assert e.value.status == 422


def test_watchlist_stream_as_client_go_reads_it(server, objects):
    """client-go's reflector with WatchListClient: sendInitialEvents=true, allowWatchBookmarks=true,
    resourceVersionMatch=NotOlderThan from "": the objects, then the end bookmark at their revision."""
    ctx = ssl.create_default_context(cafile=str(server.ca_file))
    q = ("watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
         "&resourceVersion=&timeoutSeconds=10")
    req = urllib.request.Request(f"{server.url}{CM}?{q}", headers={"Authorization": f"Bearer {server.token}"})
    with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
        assert r.status == 200
        events: list[dict[str, Any]] = []
        while len(events) < 6:
            events.append(json.loads(r.readline()))
        assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [
            *[("ADDED", n) for n in [*"abce", ROOT]], ("BOOKMARK", None)]
        mark = events[-1]["object"]
        assert mark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
        rv = int(mark["metadata"]["resourceVersion"])
        assert rv >= max(int(e["object"]["metadata"]["resourceVersion"]) for e in events[:5])
        code, created = call(server, "POST", CM, {"metadata": {"name": "f"}})
        assert code == 201
        nxt = json.loads(r.readline())
        while nxt["type"] == "BOOKMARK":
            nxt = json.loads(r.readline())
        assert (nxt["type"], nxt["object"]["metadata"]["name"]) == ("ADDED", "f")
        assert int(nxt["object"]["metadata"]["resourceVersion"]) > rv
    assert call(server, "DELETE", f"{CM}/f")[0] == 200


TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"
WATCHLIST = ("watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
             "&timeoutSeconds=2")


def first_event(server, query: str, accept: str) -> tuple[int, dict[str, Any]]:
    ctx = ssl.create_default_context(cafile=str(server.ca_file))
    req = urllib.request.Request(f"{server.url}{CM}?{query}",
                                 headers={"Authorization": f"Bearer {server.token}", "Accept": accept})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            return r.status, json.loads(r.readline())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize("query", [WATCHLIST, "watch=1&allowWatchBookmarks=true&timeoutSeconds=2"])
def test_watchlist_takes_no_table(server, objects, query):
    """kube-apiserver 1.32 negotiates a WatchList (given or by the legacy default from "") without the Table
    transform (watchListEndpointRestrictions): Table alone is 406, with a plain fallback the stream is plain
    watch events; a watch from a revision still takes Table."""
    code, status = first_event(server, query, TABLE)
    assert code == 406, status
    assert (status["kind"], status["reason"], status["message"]) == (
        "Status", "NotAcceptable", "only the following media types are accepted: application/json, "
        "application/yaml, application/vnd.kubernetes.protobuf")
    code, event = first_event(server, query, f"{TABLE},application/json")
    assert code == 200
    assert (event["type"], event["object"]["kind"]) == ("ADDED", "ConfigMap")
    code, event = first_event(server, f"watch=1&resourceVersion={objects['at']}&timeoutSeconds=2",
                              f"{TABLE},application/json")
    assert code == 200
    assert (event["type"], event["object"]["kind"]) == ("MODIFIED", "Table")


META_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
META = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
PARTIAL = ("PartialObjectMetadata", "meta.k8s.io/v1")


def test_metadata_list_is_kubes(server, objects):
    """client-go's metadata client lists as PartialObjectMetadataList: every item a PartialObjectMetadata
    with the object's whole ObjectMeta, the list's resourceVersion and continue as the plain list's; the
    object kind asked of a list (and the list kind of one object) is kube's 406."""
    code, plain = call(server, "GET", CM)
    code, doc = call(server, "GET", CM, headers={"Accept": META_LIST})
    assert code == 200
    assert (doc["kind"], doc["apiVersion"]) == ("PartialObjectMetadataList", "meta.k8s.io/v1")
    assert doc["metadata"]["resourceVersion"] == plain["metadata"]["resourceVersion"]
    assert [(i["kind"], i["apiVersion"]) for i in doc["items"]] == [PARTIAL] * len(plain["items"])
    assert [i["metadata"] for i in doc["items"]] == [i["metadata"] for i in plain["items"]]
    assert not any("data" in i for i in doc["items"])
    code, page = call(server, "GET", f"{CM}?limit=2", headers={"Accept": META_LIST})
    assert code == 200 and names(page) == ["a", "b"]
    assert page["metadata"]["continue"] and page["metadata"]["remainingItemCount"] == len(plain["items"]) - 2
    code, st = call(server, "GET", CM, headers={"Accept": "application/json;as=PartialObjectMetadata;"
                                                          "g=meta.k8s.io;v=v1"})
    assert (code, st["reason"], st["message"]) == (
        406, "NotAcceptable", "you requested PartialObjectMetadata, but the requested object is a list "
                              "(*v1.ConfigMapList)")
    code, one = call(server, "GET", f"{CM}/a", headers={"Accept": META})
    assert (code, one["kind"], one["apiVersion"], one["metadata"]["name"]) == (200, *PARTIAL, "a")
    code, st = call(server, "GET", f"{CM}/a", headers={"Accept": META_LIST.split(",")[0]})
    assert (code, st["message"]) == (406, "you requested PartialObjectMetadataList, but the requested object "
                                          "is not a list (*v1.ConfigMap)")


def test_metadata_watch_is_kubes(server, objects):
    """A metadata watch: each event's object a PartialObjectMetadata (its resourceVersion the object's), and
    the bookmarks too (kube's watch encoder transforms every object but a Status): a WatchList's
    initial-events-end bookmark keeps its annotation and revision."""
    code, event = first_event(server, f"watch=1&resourceVersion={objects['at']}&timeoutSeconds=2", META)
    assert code == 200 and event["type"] == "MODIFIED"
    obj = event["object"]
    assert ((obj["kind"], obj["apiVersion"]), obj["metadata"]["name"]) == (PARTIAL, "c")
    assert "data" not in obj and int(obj["metadata"]["resourceVersion"]) > int(objects["at"])
    ctx = ssl.create_default_context(cafile=str(server.ca_file))
    req = urllib.request.Request(f"{server.url}{CM}?{WATCHLIST}",
                                 headers={"Authorization": f"Bearer {server.token}", "Accept": META})
    with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
        events = [json.loads(r.readline()) for _ in range(6)]
    assert [(e["type"], e["object"]["kind"], e["object"]["apiVersion"]) for e in events] == \
        [("ADDED", *PARTIAL)] * 5 + [("BOOKMARK", *PARTIAL)]
    mark = events[-1]["object"]["metadata"]
    assert mark["annotations"] == {"k8s.io/initial-events-end": "true"} and int(mark["resourceVersion"]) >= \
        max(int(e["object"]["metadata"]["resourceVersion"]) for e in events[:5])


async def test_the_clients_metadata_list_and_watch(server, objects):
    """`Client.list`/`watch` with metadata_only (the garbage collector's informers) read ObjectMeta alone."""
    from nodeagent.client.rest import Client
    async with Client(server.url, token=server.token, ca_file=str(server.ca_file)) as c:
        out = await c.list("configmaps", NS, limit=2, metadata_only=True)
        assert out["kind"] == "PartialObjectMetadataList" and names(out) == [*"abce", ROOT]
        assert all((i["kind"], i["apiVersion"]) == PARTIAL and set(i) == {"kind", "apiVersion", "metadata"}
                   for i in out["items"])
        async for ev in c.watch("configmaps", NS, objects["at"], timeout_seconds=2, metadata_only=True):
            assert (ev["type"], (ev["object"]["kind"], ev["object"]["apiVersion"])) == ("MODIFIED", PARTIAL)
            break

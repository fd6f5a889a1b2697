"""The list handler's resourceVersion semantics (kube-apiserver 1.32's cacher and etcd3 store) over a
memory store: "", "0", NotOlderThan, Exact, the legacy exact list, pages at one revision, and 410s."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from aiohttp.test_utils import make_mocked_request

from nodeagent.api.resources import builtin
from nodeagent.apiserver import handlers as handlers_mod
from nodeagent.apiserver import list_options
from nodeagent.apiserver.auth import TokenFile
from nodeagent.apiserver.cache import WatchCache
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.handlers import Handlers, Wants
from nodeagent.apiserver.registry import Registry
from nodeagent.apiserver.request import parse
from nodeagent.store.memory import MemoryStore

NS, CMS = builtin("", "v1", "namespaces"), builtin("", "v1", "configmaps")
PATH = "/api/v1/namespaces/d/configmaps"


@pytest.fixture
async def api():
    store = MemoryStore()
    reg = Registry(store)
    await reg.create(NS, None, {"metadata": {"name": "d"}})
    cache = WatchCache(store)
    await cache.start()
    h = Handlers(reg, cache, cast(TokenFile, None), "127.0.0.1")
    yield reg, store, h
    await cache.stop()


async def get(h: Handlers, query: str) -> dict[str, Any]:
    req = make_mocked_request("GET", f"{PATH}?{query}")
    info = parse("GET", PATH, req.query)
    assert info is not None
    resp = await h._list(req, info, Wants(""))
    return json.loads(cast(bytes, cast(Any, resp).body))


async def refused(h: Handlers, query: str) -> dict[str, Any]:
    with pytest.raises(ApiError) as e:
        await get(h, query)
    return e.value.status()


def names(doc: dict[str, Any]) -> list[str]:
    return [i["metadata"]["name"] for i in doc["items"]]


async def fill(reg: Registry, *names: str) -> int:
    rev = 0
    for n in names:
        o = await reg.create(CMS, "d", {"metadata": {"name": n}, "data": {"v": "1"}})
        rev = int(o["metadata"]["resourceVersion"])
    return rev


async def test_latest_any_and_not_older_than(api, monkeypatch):
    reg, store, h = api
    await fill(reg, "a", "b", "c")
    doc = await get(h, "")
    assert names(doc) == ["a", "b", "c"] and doc["metadata"]["resourceVersion"] == str(store.revision)
    # "0": any, from the cache, and the cacher ignores its limit
    doc = await get(h, "resourceVersion=0&limit=1")
    assert names(doc) == ["a", "b", "c"] and "continue" not in doc["metadata"]
    doc = await get(h, "limit=-1")  # no limit
    assert names(doc) == ["a", "b", "c"] and "continue" not in doc["metadata"]
    doc = await get(h, f"resourceVersion={store.revision}&resourceVersionMatch=NotOlderThan")
    assert names(doc) == ["a", "b", "c"]
    monkeypatch.setattr(handlers_mod, "FRESH_WAIT_S", 0.1)
    ahead = store.revision + 10
    st = await refused(h, f"resourceVersion={ahead}")
    assert (st["code"], st["reason"]) == (504, "Timeout")
    assert st["message"] == f"Timeout: Too large resource version: {ahead}, current: {store.revision}"
    assert st["details"] == {"causes": [{"reason": "ResourceVersionTooLarge",
                                         "message": "Too large resource version"}], "retryAfterSeconds": 1}


async def test_exact_and_the_legacy_exact_list_read_the_state_then(api):
    reg, store, h = api
    at = await fill(reg, "a", "b")
    b = await reg.get(CMS, "d", "b")
    b["data"] = {"v": "2"}
    await reg.update(CMS, "d", "b", b)
    await reg.delete(CMS, "d", "a")
    await fill(reg, "c")
    doc = await get(h, f"resourceVersion={at}&resourceVersionMatch=Exact")
    assert names(doc) == ["a", "b"] and doc["items"][1]["data"] == {"v": "1"}
    assert doc["metadata"]["resourceVersion"] == str(at)
    doc = await get(h, f"resourceVersion={at}&limit=1")  # limit with no match: kube's legacy exact
    assert names(doc) == ["a"] and doc["metadata"]["resourceVersion"] == str(at)
    assert doc["metadata"]["remainingItemCount"] == 1
    doc = await get(h, f"resourceVersion={at}")  # NotOlderThan: the latest
    assert names(doc) == ["b", "c"]
    st = await refused(h, f"resourceVersion={store.revision + 5}&resourceVersionMatch=Exact")
    assert (st["code"], st.get("reason"), st["message"]) == (
        500, None, "etcdserver: mvcc: required revision is a future revision")
    await store.compact(store.revision)
    st = await refused(h, f"resourceVersion={at}&resourceVersionMatch=Exact")
    assert (st["code"], st["reason"], st["message"]) == (
        410, "Expired", "The resourceVersion for the provided list is too old.")


async def test_pages_are_one_snapshot_and_an_expired_continue_offers_the_rest(api):
    reg, store, h = api
    await fill(reg, "a", "b", "c", "d", "e")
    first = await get(h, "limit=2")
    assert names(first) == ["a", "b"] and first["metadata"]["remainingItemCount"] == 3
    at = first["metadata"]["resourceVersion"]
    c = await reg.get(CMS, "d", "c")
    c["data"] = {"v": "2"}
    await reg.update(CMS, "d", "c", c)
    await reg.delete(CMS, "d", "d")
    await fill(reg, "f")
    second = await get(h, f"limit=2&continue={first['metadata']['continue']}")
    assert names(second) == ["c", "d"] and second["items"][0]["data"] == {"v": "1"}
    assert second["metadata"]["resourceVersion"] == at
    st = await refused(h, f"limit=2&continue={second['metadata']['continue']}&resourceVersion=7")
    assert (st["code"], st["message"]) == (400,
                                           "specifying resource version is not allowed when using continue")
    await store.compact(store.revision)
    st = await refused(h, f"limit=2&continue={second['metadata']['continue']}")
    assert (st["code"], st["reason"], st["message"]) == (410, "Expired", list_options.INCONSISTENT_CONTINUE)
    rest = await get(h, f"limit=2&continue={st['metadata']['continue']}")  # at the latest revision
    assert names(rest) == ["e", "f"] and rest["metadata"]["resourceVersion"] == str(store.revision)
    assert "continue" not in rest["metadata"]


async def test_a_continue_is_issued_while_objects_remain_even_if_none_match(api):
    reg, _, h = api
    await reg.create(CMS, "d", {"metadata": {"name": "a", "labels": {"x": "1"}}})
    await reg.create(CMS, "d", {"metadata": {"name": "b"}})
    doc = await get(h, "limit=1&labelSelector=x%3D1")
    assert names(doc) == ["a"] and doc["metadata"].get("continue")  # kube's hasMore counts every key
    assert "remainingItemCount" not in doc["metadata"]
    rest = await get(h, f"limit=1&labelSelector=x%3D1&continue={doc['metadata']['continue']}")
    assert names(rest) == [] and "continue" not in rest["metadata"]

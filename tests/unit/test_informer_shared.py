"""informer.shared across identities: components with their own credentials read one cache of a resource, each
only once the apiserver (a SelfSubjectAccessReview with its own credential) says it may list and watch it."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from nodeagent.client import informer as informer_mod
from nodeagent.client.informer import SharedInformers, shared
from nodeagent.testing.listwatch import ListWatchClient as _Client


def _svc(name: str, rv: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": str(rv)}}


async def _until(pred: Any) -> None:
    for _ in range(200):
        if pred():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def _stop(*tasks: asyncio.Task[Any]) -> None:
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await t


async def test_another_identity_reads_the_one_cache_once_the_apiserver_allows_it():
    first = _Client([_svc("a"), _svc("b")], name="scheduler")
    second = _Client([], name="controllers")
    one, two = shared(first, "services"), shared(second, "services")  # type: ignore[arg-type]
    assert one.informer is two.informer
    assert one.granted and not two.granted  # the first user's list is its own check; the second asks
    seen: list[str] = []
    two.add_handler(lambda o: seen.append(o["metadata"]["name"]))
    assert two.list() == [] and two.get("a", "ns") is None  # nothing before its access is known
    t1 = asyncio.create_task(one.run())
    t2 = asyncio.create_task(two.run())
    try:
        await asyncio.wait_for(two.wait_synced(), 5)
        assert {r["verb"] for r in second.reviews} == {"list", "watch"}
        assert all(r["resource"] == "services" and r["group"] == "" for r in second.reviews)
        assert sorted(seen) == ["a", "b"] and len(two.list()) == 2
        first.events.put_nowait({"type": "ADDED", "object": _svc("c", 2)})
        await _until(lambda: "c" in seen)
        assert first.lists == 1 and second.lists == 0  # one list and one watch for both
    finally:
        await _stop(t1, t2)


async def test_a_refused_identity_sees_nothing_and_says_why(caplog):
    first = _Client([_svc("a")], name="dns")
    refused = _Client([], allowed=False, name="nobody")
    one, other = shared(first, "services", "ns"), shared(refused, "services", "ns")  # type: ignore[arg-type]
    seen: list[str] = []
    other.add_handler(lambda o: seen.append(o["metadata"]["name"]))
    t1 = asyncio.create_task(one.run())
    t2 = asyncio.create_task(other.run())
    try:
        await asyncio.wait_for(one.wait_synced(), 5)
        await _until(lambda: len(refused.reviews) >= 2)
        await asyncio.sleep(0.05)
        assert not other.synced.is_set() and other.list() == [] and other.cache == {} and seen == []
        assert refused.reviews[0]["namespace"] == "ns"
        assert "may not list services: no RBAC rule" in caplog.text
        refused.allowed = True  # a binding made later: the retry lets it in, with the replay
        await asyncio.wait_for(other.wait_synced(), 5)
        assert seen == ["a"]
    finally:
        await _stop(t1, t2)


async def test_a_users_handlers_go_when_it_stops_and_the_cache_lives_on():
    first = _Client([_svc("a")], name="dns")
    second = _Client([], name="controllers")
    keep = shared(first, "services")  # type: ignore[arg-type]
    t1 = asyncio.create_task(keep.run())
    informers = SharedInformers(second, share=True)  # type: ignore[arg-type]
    gone: list[str] = []
    informers.get("services").add_handler(lambda o: gone.append(o["metadata"]["name"]))
    try:
        async with asyncio.TaskGroup() as tg:
            run = asyncio.create_task(informers.run(tg))
            await asyncio.wait_for(run, 5)
            assert gone == ["a"]
            for t in [t for t in asyncio.all_tasks() if (t.get_name() or "").startswith("informer-")]:
                t.cancel()
        first.events.put_nowait({"type": "ADDED", "object": _svc("b", 2)})
        await _until(lambda: keep.get("b", "ns") is not None)
        assert gone == ["a"]  # the stopped user's handler no longer runs
        assert len(keep.informer._handlers) == 0 and not t1.done()
    finally:
        await _stop(t1)


def test_per_name_reads_stay_per_identity():
    """A field selector is how a node reads the one Secret it may (the Node authorizer): never shared."""
    a: Any = _Client([], name="n1")
    b: Any = _Client([], name="n2")
    sel = "metadata.name=x"
    assert shared(a, "secrets", "ns", field_selector=sel).informer is not \
        shared(b, "secrets", "ns", field_selector=sel).informer
    assert informer_mod.shared(a, "secrets", "ns").informer is shared(b, "secrets", "ns").informer

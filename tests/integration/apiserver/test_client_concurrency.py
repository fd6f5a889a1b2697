"""nodeagent.client against an in-process apiserver: conflicts, 100 watchers, informers, relist after
compaction, leader election."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from nodeagent.apiserver.config import ApiServerConfig
from nodeagent.apiserver.server import ApiServer
from nodeagent.client import Client, ClientError, Informer
from nodeagent.client.leader import LeaderElector


@pytest.fixture
async def live(tmp_path):
    srv = ApiServer(ApiServerConfig(data_dir=str(tmp_path), bind_address="127.0.0.1", port=0,
                                    datastore="memory"))
    await srv.start()
    c = Client.from_kubeconfig(srv.kubeconfig_path, max_connections=200)
    try:
        yield srv, c
    finally:
        await c.close()
        await srv.stop()


def cm(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def test_conflicting_updates_one_wins(live):
    _, c = live
    base = await c.create("configmaps", cm("x", v="0"), "default")
    a, b = dict(base, data={"v": "a"}), dict(base, data={"v": "b"})
    await c.update("configmaps", a, "default")
    with pytest.raises(ClientError) as e:
        await c.update("configmaps", b, "default")
    assert e.value.conflict and "the object has been modified" in e.value.message
    assert (await c.get("configmaps", "x", "default"))["data"] == {"v": "a"}
    # concurrent patches without a resourceVersion all land (the server retries on its own conflicts)
    await asyncio.gather(*(c.patch("configmaps", "x", {"data": {f"k{i}": str(i)}}, "default")
                           for i in range(30)))
    got = (await c.get("configmaps", "x", "default"))["data"]
    assert all(got[f"k{i}"] == str(i) for i in range(30))


async def test_100_watchers_see_every_event_once_in_order(live):
    _, c = live
    await c.create("namespaces", {"metadata": {"name": "w"}})
    rv = (await c.list("configmaps", "w"))["metadata"]["resourceVersion"]
    n_watchers, expected = 100, []
    got: list[list[tuple[str, str, str]]] = [[] for _ in range(n_watchers)]
    started = asyncio.Event()
    connected = 0

    async def watcher(i: int) -> None:
        nonlocal connected
        connected += 1
        if connected == n_watchers:
            started.set()
        async for ev in c.watch("configmaps", "w", rv, bookmarks=False):
            m = ev["object"]["metadata"]
            if m["name"] == "kube-root-ca.crt":
                continue  # the root CA publisher's, made in a new namespace whenever it gets to it
            got[i].append((ev["type"], m["name"], m["resourceVersion"]))
            if m["name"] == "end":
                return

    tasks = [asyncio.create_task(watcher(i)) for i in range(n_watchers)]
    await started.wait()
    for i in range(40):
        o = await c.create("configmaps", cm(f"c{i}", a="1"), "w")
        expected.append(("ADDED", f"c{i}", o["metadata"]["resourceVersion"]))
        if i % 2:
            o = await c.patch("configmaps", f"c{i}", {"data": {"a": "2"}}, "w")
            expected.append(("MODIFIED", f"c{i}", o["metadata"]["resourceVersion"]))
        if i % 4 == 3:
            await c.delete("configmaps", f"c{i}", "w")
            expected.append(("DELETED", f"c{i}", None))
    o = await c.create("configmaps", cm("end"), "w")
    expected.append(("ADDED", "end", o["metadata"]["resourceVersion"]))
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    for seq in got:
        assert [(t, n) for t, n, _ in seq] == [(t, n) for t, n, _ in expected]
        assert [rv for (_, _, rv), (_, _, want) in zip(seq, expected, strict=True) if want] == [
            w for _, _, w in expected if w]
        revs = [int(r) for _, _, r in seq]
        assert revs == sorted(revs) and len(set(revs)) == len(revs)


async def test_watch_too_old_gives_410(live):
    srv, c = live
    await c.create("configmaps", cm("a"), "default")
    await srv.store.compact(srv.store.revision)
    with pytest.raises(ClientError) as e:
        async for _ in c.watch("configmaps", "default", "1"):
            pass
    assert e.value.gone and e.value.reason == "Expired"


ROOT_CA = "kube-root-ca.crt"


async def test_informer_handlers_and_relist_after_compaction(live):
    srv, c = live
    await c.create("namespaces", {"metadata": {"name": "inf"}})
    await c.create("configmaps", cm("pre"), "inf")
    inf = Informer(c, "configmaps", "inf", watch_timeout=1)
    inf.add_index("tier", lambda o: [(o["metadata"].get("labels") or {}).get("tier", "none")])
    events: list[tuple[str, str]] = []

    def seen(kind: str, o: dict) -> None:
        if o["metadata"]["name"] != ROOT_CA:  # the root CA publisher's ConfigMap arrives when it will
            events.append((kind, o["metadata"]["name"]))

    inf.add_handler(on_add=lambda o: seen("add", o), on_update=lambda old, new: seen("update", new),
                    on_delete=lambda o: seen("delete", o))
    task = asyncio.create_task(inf.run())
    try:
        await asyncio.wait_for(inf.wait_synced(), 10)
        assert events == [("add", "pre")]
        await c.create("configmaps", cm("b"), "inf")
        await c.patch("configmaps", "b", {"data": {"x": "1"}}, "inf")
        await c.delete("configmaps", "pre", "inf")
        for _ in range(100):
            if len(events) == 4:
                break
            await asyncio.sleep(0.05)
        assert events[1:] == [("add", "b"), ("update", "b"), ("delete", "pre")]
        await c.patch("configmaps", "b", {"metadata": {"labels": {"tier": "web"}}}, "inf")
        for _ in range(100):
            if inf.by_index("tier", "web"):
                break
            await asyncio.sleep(0.05)
        assert [o["metadata"]["name"] for o in inf.by_index("tier", "web")] == ["b"]
        assert [o for o in inf.by_index("tier", "none") if o["metadata"]["name"] != ROOT_CA] == []
        await c.create("configmaps", cm("after"), "inf")
        for _ in range(100):
            if inf.get("after", "inf"):
                break
            await asyncio.sleep(0.05)
        # History moves on elsewhere and is compacted past the informer's last version: its next watch
        # (every second here) gets 410 Gone and it relists.
        for i in range(5):
            await c.create("configmaps", cm(f"o{i}"), "default")
        await srv.store.compact(srv.store.revision)
        for _ in range(100):
            if inf.relists >= 1 and inf.get("after", "inf"):
                break
            await asyncio.sleep(0.05)
        assert inf.relists >= 1
        assert sorted(o["metadata"]["name"] for o in inf.list() if o["metadata"]["name"] != ROOT_CA) == [
            "after", "b"]
        assert events.count(("add", "after")) == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_leader_election_single_leader_and_takeover(live):
    _, c = live
    a = LeaderElector(c, "ctl", "a", lease_duration=2, renew_deadline=1.5, retry_period=0.2)
    b = LeaderElector(c, "ctl", "b", lease_duration=2, renew_deadline=1.5, retry_period=0.2)
    stop_a = asyncio.Event()
    ran: list[str] = []

    async def work(name: str, stop: asyncio.Event) -> None:
        ran.append(name)
        await stop.wait()

    ta = asyncio.create_task(a.run(lambda: work("a", stop_a)))
    await asyncio.sleep(0.5)
    tb = asyncio.create_task(b.run(lambda: work("b", asyncio.Event())))
    await asyncio.sleep(1.0)
    assert ran == ["a"] and a.is_leader and not b.is_leader
    ta.cancel()  # a dies without releasing: b takes over after the lease expires
    with contextlib.suppress(asyncio.CancelledError):
        await ta
    for _ in range(100):
        if b.is_leader:
            break
        await asyncio.sleep(0.1)
    assert b.is_leader and ran == ["a", "b"]
    lease = await c.get("leases", "ctl", "kube-system")
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
    tb.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await tb


async def test_leader_work_that_fails_is_logged_and_run_again(live, caplog):
    """A crash in the work under the lease is logged and the elector campaigns again (silence here once
    left a controller manager holding no lease and running nothing)."""
    _, c = live
    el = LeaderElector(c, "crashy", "a", lease_duration=2, renew_deadline=1.5, retry_period=0.1)
    runs: list[int] = []
    done = asyncio.Event()

    async def work() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise RuntimeError("controller crashed")
        done.set()

    caplog.set_level("ERROR", "nodeagent.client.leader")
    await asyncio.wait_for(el.run(work), 10)
    assert runs == [0, 1] and done.is_set()
    assert "the work under lease kube-system/crashy failed" in caplog.text
    assert "controller crashed" in caplog.text


async def test_request_past_its_deadline_is_a_client_error(live):
    """aiohttp's total timeout is a bare TimeoutError; callers catch ClientError for every failed call."""
    _, c = live
    with pytest.raises(ClientError) as e:
        await c.request("GET", "/api/v1/namespaces/default/configmaps?watch=1", deadline=0.3)
    assert e.value.code == 0 and e.value.reason == "Timeout" and "0.3 s" in e.value.message


async def test_server_side_apply_creates_then_merges(live):
    _, c = live
    o = await c.apply("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"},
                                     "data": {"a": "1", "b": "1"}}, "tester", "default")
    assert o["data"] == {"a": "1", "b": "1"}
    assert [m["manager"] for m in o["metadata"]["managedFields"]] == ["tester"]
    await c.patch("configmaps", "ssa", {"data": {"c": "by-hand"}}, "default")  # not owned by the applier
    o = await c.apply("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"},
                                     "data": {"a": "2"}}, "tester", "default")
    assert o["data"] == {"a": "2", "c": "by-hand"}  # b: no longer applied by its owner, so removed
    o = await c.apply("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"},
                                     "data": {"d": "1"}}, "other", "default")
    o = await c.apply("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"},
                                     "data": {"d": "1"}}, "tester", "default")
    assert o["data"] == {"c": "by-hand", "d": "1"}  # d is still applied by "other"
    with pytest.raises(ClientError) as e:
        await c.patch("configmaps", "ssa", {"data": {}}, "default", "apply")  # no fieldManager
    assert e.value.code == 422


async def _until(cond, what: str) -> None:
    for _ in range(200):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_shared_informer_one_cache_handoff_and_release(live):
    """Two components with the same credentials read one informer: one list and one watch on the server,
    a handler added late sees every cached object, the second runner carries on when the first stops, and
    the informer is forgotten once no one runs it."""
    from nodeagent.client.informer import shared

    srv, c = live
    c2 = Client.from_kubeconfig(srv.kubeconfig_path)  # another component's client, same identity
    await c.create("namespaces", {"metadata": {"name": "shr"}})
    await c.create("configmaps", cm("pre"), "shr")
    a = shared(c, "configmaps", "shr")
    b = shared(c2, "configmaps", "shr")
    assert a.informer is b.informer
    seen_a: list[str] = []
    seen_b: list[str] = []
    remove_a = a.add_handler(lambda o: seen_a.append(o["metadata"]["name"]))

    def watches() -> int:  # the server's watch streams on these objects
        return sum("/configmaps/shr" in sub.prefix for sub in srv.cache._subs)
    ta = asyncio.create_task(a.run(client=c))
    try:
        await asyncio.wait_for(a.wait_synced(), 10)
        tb = asyncio.create_task(b.run(client=c2))
        b.add_handler(lambda o: seen_b.append(o["metadata"]["name"]))  # late: replayed from the cache
        assert seen_b == ["pre"]
        await _until(lambda: watches() == 1, "the one watch")
        await asyncio.sleep(0.3)
        assert watches() == 1  # b's run() did not open a second watch
        # the first component stops: its handler goes, the second runner takes over with its own client
        remove_a()
        ta.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ta
        await c.create("configmaps", cm("after"), "shr")
        await _until(lambda: "after" in seen_b, "the event after the handoff")
        assert seen_a == ["pre"] and seen_b.count("after") == 1
        assert b.informer.client is c2
        tb.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tb
        # no one runs it: the next user gets a fresh one
        assert shared(c, "configmaps", "shr").informer is not a.informer
    finally:
        for t in (ta,):
            t.cancel()
        await c2.close()


async def test_shared_informer_across_identities_as_the_apiserver_authorizes(live):
    """Components with their own credentials share one informer (one watch on the server); one whose
    credential may not list and watch the objects sees nothing of the cache, as its own refused list would
    show it, until a binding lets it in."""
    from nodeagent.client.informer import shared

    srv, c = live
    ns = "shr2"
    await c.create("namespaces", {"metadata": {"name": ns}})
    await c.create("configmaps", cm("pre"), ns)
    for sa in ("reader", "nobody"):
        await c.create("serviceaccounts", {"metadata": {"name": sa}}, ns)
    await c.create("roles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                             "metadata": {"name": "cm-reader"},
                             "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                                        "verbs": ["list", "watch"]}]}, ns)

    def binding(sa: str) -> dict:
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": f"cm-reader-{sa}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]}
    await c.create("rolebindings", binding("reader"), ns)

    async def token(sa: str) -> str:
        out = await c.create("serviceaccounts", {"apiVersion": "authentication.k8s.io/v1",
                                                 "kind": "TokenRequest", "spec": {}},
                             ns, subresource="token", name=sa)
        return out["status"]["token"]
    reader, nobody = c.with_token(await token("reader")), c.with_token(await token("nobody"))
    mine, theirs, refused = shared(c, "configmaps", ns), shared(reader, "configmaps", ns), \
        shared(nobody, "configmaps", ns)
    assert mine.informer is theirs.informer is refused.informer
    seen: list[str] = []
    refused.add_handler(lambda o: seen.append(o["metadata"]["name"]))

    def watches() -> int:
        return sum(f"/configmaps/{ns}" in sub.prefix for sub in srv.cache._subs)
    tasks = [asyncio.create_task(h.run()) for h in (mine, theirs, refused)]
    try:
        await asyncio.wait_for(theirs.wait_synced(), 10)
        assert [o["metadata"]["name"] for o in theirs.list()] == ["pre"]
        await asyncio.sleep(0.5)
        assert not refused.synced.is_set() and refused.list() == [] and seen == []
        assert watches() == 1
        await c.create("rolebindings", binding("nobody"), ns)  # let in: the next check passes
        await asyncio.wait_for(refused.wait_synced(), 20)
        assert seen == ["pre"] and watches() == 1
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for cl in (reader, nobody):
            await cl.close()

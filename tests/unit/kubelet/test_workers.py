"""Pod workers: one task per pod, latest update wins, sync → terminating → terminated."""

import asyncio
from typing import Any

from nodeagent.kubelet.workers import Phase, PodWorkers


def _pod(uid, gen=0, deleting=False):
    m = {"uid": uid, "name": f"p-{uid}", "namespace": "default", "generation": gen}
    if deleting:
        m["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": m, "spec": {}}


async def test_updates_coalesce_to_the_latest():
    seen = []
    gate = asyncio.Event()

    async def sync(pod):
        seen.append(pod["metadata"]["generation"])
        await gate.wait()
        return None

    async def terminate(pod):
        raise AssertionError("not deleted")

    async with asyncio.TaskGroup() as tg:
        w = PodWorkers(tg, sync, terminate, resync=3600)
        w.update(_pod("a", 1))
        await asyncio.sleep(0.01)  # the first sync is running and blocked
        for gen in (2, 3, 4):
            w.update(_pod("a", gen))
        gate.set()
        await asyncio.sleep(0.05)
        assert seen == [1, 4]  # 2 and 3 were superseded while 1 ran
        assert w.phase("a") == Phase.SYNC
        await w.stop()


async def test_deletion_terminates_once_and_forgets_the_pod():
    terminated = []

    async def sync(pod):
        return None

    async def terminate(pod):
        terminated.append(pod["metadata"]["uid"])

    async with asyncio.TaskGroup() as tg:
        w = PodWorkers(tg, sync, terminate, resync=3600)
        w.update(_pod("a"))
        await asyncio.sleep(0.01)
        w.update(_pod("a", deleting=True))
        await asyncio.sleep(0.05)
        assert terminated == ["a"]
        assert w.phase("a") is None and "a" in w.finished
        w.remove(_pod("a"))  # the informer's delete after our final delete: ignored
        w.update(_pod("a", deleting=True))
        await asyncio.sleep(0.05)
        assert terminated == ["a"]


async def test_failed_termination_is_retried():
    calls = 0

    async def sync(pod):
        return None

    async def terminate(pod):
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("runtime busy")

    async with asyncio.TaskGroup() as tg:
        w = PodWorkers(tg, sync, terminate, resync=3600, retry=0.01)
        w.remove(_pod("b"))
        await asyncio.sleep(0.1)
        assert calls == 2 and w.phase("b") is None


async def test_sync_hint_schedules_the_next_sync():
    n = 0

    async def sync(pod):
        nonlocal n
        n += 1
        return 0.01  # e.g. a container is in back-off

    async def terminate(pod):
        pass

    async with asyncio.TaskGroup() as tg:
        w = PodWorkers(tg, sync, terminate, resync=3600)
        w.update(_pod("c"))
        await asyncio.sleep(0.2)
        await w.stop()
    assert n >= 3


async def test_status_only_update_refreshes_the_slot_without_a_sync():
    seen = []

    async def sync(pod):
        seen.append(pod["metadata"]["generation"])
        return None

    async def terminate(pod):
        pass

    async with asyncio.TaskGroup() as tg:
        w = PodWorkers(tg, sync, terminate, resync=3600)
        w.update(_pod("a", 1))
        await asyncio.sleep(0.02)
        w.update(_pod("a", 2), wake=False)
        await asyncio.sleep(0.02)
        assert seen == [1]
        w.poke("a")  # the next wake syncs the newest pod
        await asyncio.sleep(0.02)
        assert seen == [1, 2]
        await w.stop()


def test_only_spec_or_metadata_changes_are_desired_changes():
    from nodeagent.kubelet.agent import _desired_changed

    old: dict[str, Any] = {"metadata": {"name": "p", "resourceVersion": "1", "labels": {"a": "1"}},
                           "spec": {"x": 1}, "status": {"phase": "Pending"}}
    status_only = {**old, "metadata": {**old["metadata"], "resourceVersion": "2"},
                   "status": {"phase": "Running"}}
    assert not _desired_changed(old, status_only)
    deleting = {**old, "metadata": {**old["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert _desired_changed(old, deleting)
    assert _desired_changed(old, {**old, "spec": {"x": 2}})


async def test_a_pods_blocking_work_is_ranked_by_its_arrival_until_it_has_started_then_behind_every_start():
    from kernel.ordered_executor import AFTER_STARTS, WORK_ORDER

    seen: dict[str, list[int | None]] = {}

    async def sync(pod):
        seen.setdefault(pod["metadata"]["uid"], []).append(WORK_ORDER.get())
        return None

    async def terminate(pod):
        seen.setdefault(pod["metadata"]["uid"], []).append(WORK_ORDER.get())

    async with asyncio.TaskGroup() as tg:
        w = PodWorkers(tg, sync, terminate, resync=3600)
        for uid in ("a", "b", "c"):
            w.update(_pod(uid))
        await asyncio.sleep(0.02)
        w.poke("b")  # a later sync (PLEG's event after the start)
        await asyncio.sleep(0.02)
        w.update(_pod("c", deleting=True))
        await asyncio.sleep(0.02)
        assert seen == {"a": [0], "b": [1, AFTER_STARTS + 1], "c": [2, 2]}
        assert WORK_ORDER.get() is None  # set in each pod's own task only
        await w.stop()

"""The periodic compactor: compacts to the revision of one interval ago, keeping the newest ones."""

import asyncio

import pytest

from nodeagent.store.base import Gone
from nodeagent.store.compactor import compaction_target, run_compactor
from nodeagent.store.memory import MemoryStore


def test_compaction_target():
    assert compaction_target(previous=50, current=2000, compacted=0, keep=1000) == 50
    assert compaction_target(previous=1500, current=2000, compacted=0, keep=1000) == 1000
    assert compaction_target(previous=50, current=500, compacted=0, keep=1000) is None
    assert compaction_target(previous=50, current=2000, compacted=50, keep=1000) is None


async def test_run_compactor_rounds():
    store = MemoryStore()
    await store.start()
    rounds: asyncio.Queue[int] = asyncio.Queue()
    go = asyncio.Event()

    async def fake_sleep(_):
        await rounds.put(store.revision)
        await go.wait()
        go.clear()

    task = asyncio.create_task(run_compactor(store, interval=1, keep=5, sleep=fake_sleep))
    try:
        await rounds.get()  # round 1 starts: previous = 1
        for i in range(20):
            await store.create(f"/k/{i}", {"metadata": {"name": str(i)}})
        go.set()
        await rounds.get()  # round 1 done: compacted to the start revision
        assert store.compacted == 1
        for i in range(20, 30):
            await store.create(f"/k/{i}", {"metadata": {"name": str(i)}})
        go.set()
        await rounds.get()  # round 2: to the revision of round 1's end (21), as it is < 31 - 5
        assert store.compacted == 21
        with pytest.raises(Gone):
            async for _ in store.watch("/k/", 20):
                pass
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await store.close()

import asyncio

import pytest

from nodeagent.controllers.workqueue import BucketLimiter, ExponentialLimiter, ShutDown, WorkQueue
from nodeagent.testing.clock import FakeClock


async def test_dedupes_while_queued():
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.add("a")
    q.add("b")
    assert len(q) == 2
    assert await q.get() == "a"
    assert await q.get() == "b"


async def test_key_re_added_while_processing_runs_again_after_done():
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    key = await q.get()
    q.add("a")  # while processing: marked dirty, not handed to a second worker
    assert len(q) == 0
    q.done(key)
    assert len(q) == 1
    assert await asyncio.wait_for(q.get(), 1) == "a"


async def test_add_after_delivers_later_and_wakes_getter():
    q: WorkQueue[str] = WorkQueue()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    getter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.add_after("late", 0.05)
    assert await asyncio.wait_for(getter, 2) == "late"
    assert loop.time() - t0 >= 0.04


async def test_shutdown_ends_waiting_workers():
    q: WorkQueue[str] = WorkQueue()
    getter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.shutdown()
    with pytest.raises(ShutDown):
        await asyncio.wait_for(getter, 1)


def test_exponential_limiter_doubles_and_forgets():
    lim = ExponentialLimiter(base=0.005, cap=1.0)
    assert [lim.when("x") for _ in range(4)] == [0.005, 0.01, 0.02, 0.04]
    assert lim.retries("x") == 4
    lim.forget("x")
    assert lim.when("x") == 0.005
    for _ in range(20):
        last = lim.when("y")
    assert last == 1.0


def test_bucket_limiter_allows_burst_then_paces():
    clock = FakeClock(0.0)
    lim = BucketLimiter(qps=10, burst=3, clock=clock)
    assert [lim.when(i) for i in range(3)] == [0.0, 0.0, 0.0]
    assert lim.when(4) == pytest.approx(0.1)
    clock.advance(1.0)
    assert lim.when(5) == 0.0


async def test_get_stays_cancellable_when_an_add_races_the_cancel():
    """Getters cancelled in the same loop turn an item arrives must all end (none waits on forever)."""
    import asyncio as aio

    from nodeagent.controllers.workqueue import WorkQueue as WQ

    q: WQ[str] = WQ()
    q.add_after("later", 30.0)  # a delayed item: the getters wait with a timeout
    getters = [aio.create_task(q.get()) for _ in range(2)]  # two workers, as a controller runs
    await aio.sleep(0)
    await aio.sleep(0)
    q.add("now")  # wakes both getters ...
    for g in getters:
        g.cancel()  # ... in the same turn they are cancelled (a controller shutting down)
    done, pending = await aio.wait(getters, timeout=2)
    for g in pending:
        g.cancel()
    assert not pending, "a cancelled get() kept waiting"
    assert sum(1 for g in done if not g.cancelled()) <= 1

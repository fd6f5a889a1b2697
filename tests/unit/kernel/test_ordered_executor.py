"""The loop's default executor takes queued work by the pod order of the context that submitted it."""

import asyncio
import contextvars
import threading
import time

import pytest

from kernel.ordered_executor import AFTER_STARTS, WORK_ORDER, OrderedExecutor


def _submit_in(ex: OrderedExecutor, order: int | None, fn, *args):
    ctx = contextvars.copy_context()
    if order is not None:
        ctx.run(WORK_ORDER.set, order)
    return ctx.run(ex.submit, fn, *args)


def test_queued_work_goes_unordered_first_then_oldest_pod_first_then_in_submission_order():
    ex = OrderedExecutor(max_workers=1)
    gate = threading.Event()
    ran: list[str] = []
    first = ex.submit(gate.wait)  # holds the only thread while the rest queue
    futs = [_submit_in(ex, order, ran.append, name) for order, name in
            ((5, "pod5"), (AFTER_STARTS + 0, "pod0-later"), (1, "pod1-a"), (None, "commit"), (3, "pod3"),
             (1, "pod1-b"), (None, "sync"))]
    gate.set()
    for f in [first, *futs]:
        f.result(timeout=5)
    assert ran == ["commit", "sync", "pod1-a", "pod1-b", "pod3", "pod5", "pod0-later"]
    ex.shutdown()


def test_it_uses_up_to_max_workers_threads_at_once_and_no_more():
    ex = OrderedExecutor(max_workers=3)
    lock = threading.Lock()
    running = peak = 0
    gate = threading.Event()

    def work():
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        gate.wait(5)
        with lock:
            running -= 1

    futs = [ex.submit(work) for _ in range(6)]
    time.sleep(0.2)
    assert peak == 3
    gate.set()
    for f in futs:
        f.result(timeout=5)
    assert len({t.name for t in ex._pool}) == 3
    ex.shutdown()


def test_results_and_errors_come_back_through_the_future():
    ex = OrderedExecutor(max_workers=2)
    assert ex.submit(lambda a, b=0: a + b, 2, b=3).result(timeout=5) == 5
    with pytest.raises(ZeroDivisionError):
        ex.submit(lambda: 1 / 0).result(timeout=5)
    ex.shutdown()


def test_shutdown_runs_what_is_queued_or_cancels_it_and_refuses_new_work():
    ex = OrderedExecutor(max_workers=1)
    gate = threading.Event()
    ran: list[int] = []
    ex.submit(gate.wait)
    kept = ex.submit(ran.append, 1)
    threading.Timer(0.1, gate.set).start()
    ex.shutdown(wait=True)
    assert kept.done() and ran == [1]
    with pytest.raises(RuntimeError):
        ex.submit(ran.append, 2)

    ex = OrderedExecutor(max_workers=1)
    gate = threading.Event()
    ex.submit(gate.wait)
    dropped = ex.submit(ran.append, 3)
    ex.shutdown(wait=False, cancel_futures=True)
    gate.set()
    assert dropped.cancelled() and ran == [1]


def test_asyncio_takes_it_as_the_default_executor_and_to_thread_carries_the_order():
    seen: list[int | None] = []

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_default_executor(OrderedExecutor(max_workers=1))
        WORK_ORDER.set(7)
        await asyncio.to_thread(lambda: seen.append(WORK_ORDER.get()))

    asyncio.run(main())  # asyncio.run shuts the default executor down at the end
    assert seen == [7]

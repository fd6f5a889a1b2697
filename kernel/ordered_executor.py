"""The event loop's default executor, taking queued work oldest pod first.

`asyncio.to_thread` and `run_in_executor(None, ...)` hand blocking work (cgroup directories, mounts, the
CNI ADD's netlink, record files' fsyncs) to a few worker threads, and a plain ThreadPoolExecutor takes it
in submission order. When a node starts many pods at once every pod's next step queues behind every other
pod's current one, so all of them advance together and finish together, near the end of the burst. Here
work submitted from a context that carries an order (`WORK_ORDER`: the kubelet sets it to the order in
which its pod workers first saw each pod) waits in a heap and the oldest pod's work goes first, so pods
finish in about the order they came, as fast as before in total: the same threads do the same work.
Work without an order (the store's commits, the proxy's syncs, housekeeping) goes before all ordered work,
in submission order, so nothing else waits behind a burst.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import heapq
import itertools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

WORK_ORDER: contextvars.ContextVar[int | None] = contextvars.ContextVar("work_order", default=None)
UNORDERED = -1  # the heap key of work without an order: ahead of every pod's
AFTER_STARTS = 1 << 62  # added to a pod's order for its work once it has started: behind every start


class OrderedExecutor(concurrent.futures.ThreadPoolExecutor):
    """Up to `max_workers` threads, started as work needs them, taking the lowest (order, submission).

    A ThreadPoolExecutor by type only (asyncio's `set_default_executor` takes nothing else): its queue and
    threads are these, none of the base class's."""

    def __init__(self, max_workers: int | None = None, thread_name_prefix: str = "ordered") -> None:
        super().__init__(max_workers, thread_name_prefix)  # checks max_workers
        self._max = self._max_workers
        self._prefix = thread_name_prefix
        self._cv = threading.Condition()
        self._heap: list[tuple[int, int, concurrent.futures.Future[Any], Callable[..., Any],
                               tuple[Any, ...], dict[str, Any]]] = []
        self._seq = itertools.count()
        self._pool: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        order = WORK_ORDER.get()
        f: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._cv:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            heapq.heappush(self._heap, (UNORDERED if order is None else order, next(self._seq), f, fn, args,
                                        kwargs))
            if len(self._heap) > self._idle and len(self._pool) < self._max:
                t = threading.Thread(target=self._work, name=f"{self._prefix}_{len(self._pool)}",
                                     daemon=True)
                self._pool.append(t)
                t.start()
            else:
                self._cv.notify()
        return f

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._heap and not self._closed:
                    self._idle += 1
                    try:
                        self._cv.wait()
                    finally:
                        self._idle -= 1
                if not self._heap:
                    return  # shut down, nothing left to run
                _, _, f, fn, args, kwargs = heapq.heappop(self._heap)
            if not f.set_running_or_notify_cancel():
                continue
            try:
                f.set_result(fn(*args, **kwargs))
            except BaseException as e:  # as ThreadPoolExecutor: the caller gets it through the future
                f.set_exception(e)
            del f, fn, args, kwargs  # nothing of a finished call (its result too) kept while waiting

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._cv:
            self._closed = True
            if cancel_futures:
                for _, _, f, *_ in self._heap:
                    f.cancel()
                self._heap.clear()
            self._cv.notify_all()
            threads = list(self._pool)
        if wait:
            for t in threads:
                t.join()


__all__ = ["AFTER_STARTS", "UNORDERED", "WORK_ORDER", "OrderedExecutor"]

"""Entering a network namespace: always on a dedicated thread, which always switches back.

setns(2) changes only the calling thread's namespace, so namespace work runs on a thread of its
own, never on the event loop's or a shared pool's. `entered` is the one place that switches: into
the namespace, and back to the thread's own on the way out; if switching back ever failed the
error ends the thread, which is never reused, so no other code can run in the wrong namespace.

- `run_in(netns, fn)`: one call on a fresh thread (the CNI plugin's ADD, a port-forward connect).
- `NetnsWorker(netns)`: one long-lived thread in the namespace for every blocking call of a
  component (a proxier's syncs); child processes it forks (iptables-restore, conntrack) inherit it.

Sockets opened inside stay bound to that namespace after the thread returns, so callers open a
netlink socket in the netns and use it from anywhere.
"""

from __future__ import annotations

import os
import threading

from kernel.syscalls import CLONE_NEWNET, setns

TYPE_CHECKING = False  # typing is not imported at run time: the CNI plugins' exec'd path stays lean
if TYPE_CHECKING:
    import concurrent.futures
    from collections.abc import Callable, Iterator
    from typing import Any, TypeVar

    T = TypeVar("T")

_OWN = "/proc/thread-self/ns/net"


def netns_path(netns: str | None) -> str | None:
    """A netns name (`ip netns`) or path as a path; None for the process's own namespace."""
    if not netns:
        return None
    return netns if netns.startswith("/") else f"/run/netns/{netns}"


class _Entered:
    """Context manager: this thread in `netns` (an fd or a path) until the block ends, then back.
    Only for a thread that runs nothing else afterwards if leaving fails (the error propagates)."""

    __slots__ = ("netns", "home")

    def __init__(self, netns: int | str) -> None:
        self.netns = netns
        self.home = -1

    def __enter__(self) -> None:
        self.home = os.open(_OWN, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if isinstance(self.netns, int):
                setns(self.netns, CLONE_NEWNET)
            else:
                fd = os.open(self.netns, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    setns(fd, CLONE_NEWNET)
                finally:
                    os.close(fd)
        except BaseException:
            os.close(self.home)
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            setns(self.home, CLONE_NEWNET)  # if this raises, the thread ends with it: it is never reused
        finally:
            os.close(self.home)


def run_in(netns: int | str, fn: Callable[[], T]) -> T:
    """Call `fn` on a fresh thread inside `netns` (an fd or a path); return its value or raise its error."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            with _Entered(netns):
                box["value"] = fn()
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=body, name="netns", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class NetnsWorker:
    """Runs callables, one at a time and in order, on one thread inside `netns` (None: the
    process's own namespace). The thread starts with the first call and ends at `close()`."""

    def __init__(self, netns: str | None = None) -> None:
        import queue

        self.netns = netns
        self._path = netns_path(netns)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._broken: BaseException | None = None  # why the thread could not enter (or leave) the netns

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        import concurrent.futures

        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._broken is not None:
                future.set_exception(self._broken)
                return future
            if self._closed:
                raise RuntimeError("cannot schedule new calls after close()")
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=f"netns-{self.netns or 'host'}",
                                                daemon=True)
                self._thread.start()
            self._queue.put((future, fn, args))
        return future

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        return self.submit(fn, *args).result()

    def close(self) -> None:
        """Let queued calls finish, then end the thread (switching it back first)."""
        with self._lock:
            self._closed = True
            thread = self._thread
            if thread is not None:
                self._queue.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _serve(self) -> None:
        try:
            with _Entered(self._path) if self._path else _Here():
                for future, fn, args in self._calls():
                    if not future.set_running_or_notify_cancel():
                        continue
                    try:
                        future.set_result(fn(*args))
                    except BaseException as e:
                        future.set_exception(e)
        except BaseException as e:  # entering (or leaving) failed: every call queued or to come fails with it
            import queue

            with self._lock:
                self._broken = e
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None and item[0].set_running_or_notify_cancel():
                        item[0].set_exception(e)

    def _calls(self) -> Iterator[tuple[concurrent.futures.Future, Callable[..., Any], tuple]]:
        while True:
            item = self._queue.get()
            if item is None:
                return
            yield item


class _Here:
    """The process's own namespace: nothing to enter or leave."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None

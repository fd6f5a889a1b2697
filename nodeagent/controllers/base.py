"""The controller skeleton: shared informers, a rate-limited queue of keys, workers, expectations.

Informer handlers only enqueue keys; `reconcile(key)` reads the caches, decides
with the pure modules (replicaset.py, deployment.py, ...) and writes through the
client. A failed reconcile is retried with per-key backoff, up to 15 times.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nodeagent.client.events import EventRecorder
from nodeagent.client.informer import SharedInformers, key_of
from nodeagent.client.rest import Client
from nodeagent.clock import REAL_CLOCK, Clock
from nodeagent.controllers.options import ControllerOptions
from nodeagent.controllers.workqueue import ShutDown, WorkQueue

MAX_RETRIES = 15


class Expectations:
    """Creates/deletes a controller has asked for but not yet seen in its cache (ControllerExpectations).

    While any are outstanding (and younger than the TTL), the controller does not
    act on the count again, so a slow cache cannot make it create twice.
    """

    TTL = 300.0

    def __init__(self, clock: Clock = REAL_CLOCK) -> None:
        self.clock = clock
        self._pending: dict[str, tuple[int, int, float]] = {}

    def expect(self, key: str, adds: int = 0, deletes: int = 0) -> None:
        self._pending[key] = (adds, deletes, self.clock.monotonic())

    def observed_add(self, key: str) -> None:
        if key in self._pending:
            a, d, t = self._pending[key]
            self._pending[key] = (a - 1, d, t)

    def observed_delete(self, key: str) -> None:
        if key in self._pending:
            a, d, t = self._pending[key]
            self._pending[key] = (a, d - 1, t)

    def lower(self, key: str, adds: int = 0, deletes: int = 0) -> None:
        """An attempt failed: it will never be observed."""
        if key in self._pending:
            a, d, t = self._pending[key]
            self._pending[key] = (a - adds, d - deletes, t)

    def satisfied(self, key: str) -> bool:
        p = self._pending.get(key)
        if p is None:
            return True
        a, d, t = p
        return (a <= 0 and d <= 0) or self.clock.monotonic() - t > self.TTL

    def forget(self, key: str) -> None:
        self._pending.pop(key, None)


class Controller:
    """Subclasses set `name`, register handlers in `__init__`, and implement `reconcile`."""

    name = "controller"
    # kube's ServiceAccount for it in kube-system (--use-service-account-credentials: its writes go through
    # a client of that account, bound to system:controller:<account>); None: the manager's own credential
    service_account: str | None = None
    workers = 2

    def __init__(self, client: Client, informers: SharedInformers, recorder: EventRecorder,
                 options: ControllerOptions | None = None) -> None:
        self.client = client
        self.options = options or ControllerOptions()
        self.informers = informers
        self.recorder = recorder
        self.queue: WorkQueue[str] = WorkQueue()
        self.log = logging.getLogger(f"nodeagent.controllers.{self.name}")

    def enqueue(self, obj: dict[str, Any]) -> None:
        self.queue.add(key_of(obj))

    async def reconcile(self, key: str) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        """Workers until cancelled; the caller starts this after the informers have synced."""
        try:
            async with asyncio.TaskGroup() as tg:
                for i in range(self.workers):
                    tg.create_task(self._worker(), name=f"{self.name}-worker-{i}")
        finally:
            self.queue.shutdown()

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            try:
                await self.reconcile(key)
                self.queue.forget(key)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if self.queue.retries(key) < MAX_RETRIES:
                    self.log.info("%s: sync of %s failed, retrying: %s", self.name, key, e)
                    self.queue.add_rate_limited(key)
                else:
                    self.log.warning("%s: dropping %s after %d retries: %s", self.name, key, MAX_RETRIES, e)
                    self.queue.forget(key)
            finally:
                self.queue.done(key)


def split_key(key: str) -> tuple[str | None, str]:
    ns, _, name = key.rpartition("/")
    return (ns or None), name

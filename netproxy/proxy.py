"""The proxy frontend: watch handlers → change trackers → bounded runner → one backend sync.

Handlers (`on_service`, `on_endpoint_slice`, `on_endpoints`) only record and poke
the runner. Nothing is written before both the Services and the endpoints have
been listed once (`set_services_synced` / `set_endpoints_synced`). The sync runs
the backend on its netns worker thread; a failed sync makes the next one full,
and UDP conntrack is cleared only after the rules that stopped using an endpoint
are in place.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kernel.netns import NetnsWorker
from netproxy import conntrack
from netproxy.proxier import Proxier, SyncResult
from netproxy.runner import BoundedFrequencyRunner
from netproxy.tracker import Changes, EndpointsChangeTracker, ProxyState, ServiceChangeTracker

log = logging.getLogger("netproxy")


@dataclasses.dataclass
class SyncStats:
    syncs: int = 0
    full_syncs: int = 0
    failures: int = 0
    last: SyncResult | None = None
    last_duration: float = 0.0
    conntrack_deleted: int = 0


class Proxy:
    def __init__(self, proxier: Proxier, worker: NetnsWorker, min_interval: float = 0.0,
                 max_interval: float = 30.0, retry_interval: float = 1.0,
                 clear_conntrack: bool = True) -> None:
        self.proxier = proxier
        self.worker = worker
        self.services = ServiceChangeTracker()
        self.endpoints = EndpointsChangeTracker()
        self.state = ProxyState()
        self.services_synced = False
        self.endpoints_synced = False
        self.clear_conntrack = clear_conntrack
        self.stats = SyncStats()
        self.synced = asyncio.Event()  # set after the first successful sync
        self.on_synced: list[Callable[[ProxyState], None]] = []  # called with the applied state after a sync
        self._pending = Changes()
        self._need_full = True
        self._failing = False  # the last sync failed: the rules may not say what the API does
        self._lock = asyncio.Lock()
        self.runner = BoundedFrequencyRunner(self._sync, min_interval, max_interval, retry_interval,
                                             name=f"{proxier.name} sync")

    # -- watch handlers: record only -------------------------------------------------------------
    def on_service(self, prev: Mapping[str, Any] | None, cur: Mapping[str, Any] | None) -> None:
        if self.services.update(prev, cur):
            self.runner.run()

    def on_endpoint_slice(self, obj: Mapping[str, Any], removed: bool = False) -> None:
        if self.endpoints.update_slice(obj, removed):
            self.runner.run()

    def on_endpoints(self, prev: Mapping[str, Any] | None, cur: Mapping[str, Any] | None) -> None:
        if self.endpoints.update_endpoints(prev, cur):
            self.runner.run()

    def set_services_synced(self) -> None:
        self.services_synced = True
        self.runner.run()

    def set_endpoints_synced(self) -> None:
        self.endpoints_synced = True
        self.runner.run()

    @property
    def healthy(self) -> bool:
        """kube-proxy's healthz in short: synced once, and the last sync did not fail."""
        return self.synced.is_set() and not self._failing

    # -- the one writer ----------------------------------------------------------------------------
    async def _sync(self, periodic: bool) -> None:
        await self.sync(full=periodic)

    async def sync(self, full: bool = False) -> SyncResult | None:
        """Apply pending changes (everything if `full` or after a failure). None: nothing to do yet."""
        if not (self.services_synced and self.endpoints_synced):
            return None
        async with self._lock:
            self._pending.merge(self.state.apply(self.services, self.endpoints))
            full = full or self._need_full
            if not full and not self._pending:
                return None
            pending = self._pending
            t0 = time.perf_counter()
            try:
                done = self.worker.submit(self.proxier.sync, self.state, pending, full)
                result = await asyncio.wrap_future(done)
            except Exception:
                self._need_full = True
                self._failing = True
                self.stats.failures += 1
                raise
            self.stats.last_duration = time.perf_counter() - t0
            self._pending, self._need_full, self._failing = Changes(), False, False
            self.stats.syncs += 1
            self.stats.full_syncs += int(full)
            self.stats.last = result
            log.debug("%s sync (%s) in %.1f ms", self.proxier.name, "full" if full else "partial",
                      self.stats.last_duration * 1e3)
            if self.clear_conntrack and (pending.stale_endpoints or pending.stale_services):
                try:
                    self.stats.conntrack_deleted += await asyncio.wrap_future(self.worker.submit(
                        conntrack.clear_stale, pending.stale_endpoints, pending.stale_services))
                except Exception:
                    log.exception("conntrack cleanup failed")
            for fn in self.on_synced:
                fn(self.state)
            self.synced.set()
            return result

    async def run(self, ready: asyncio.Event | None = None) -> None:
        """Run the bounded runner until cancelled."""
        await self.runner.loop(ready)

    async def cleanup(self) -> None:
        await asyncio.wrap_future(self.worker.submit(self.proxier.cleanup))

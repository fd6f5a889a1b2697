"""The node's policy enforcer: the model, one backend, one writer.

Sources (informers, or in-memory objects for tests and the benchmark) update the in-memory model and
ask for a sync; `sync()` is the single writer of kernel state: it takes the model's accumulated changes
and hands them to the backend on the netns worker thread (never the event loop's). A bounded-frequency
runner collapses bursts and runs a periodic full resync that repairs drift; nothing is written before
every source has listed once, so a half-known policy set never isolates a pod.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Mapping
from typing import Any, Protocol

from kernel.netns import NetnsWorker
from netpol.model import Changes, PolicyModel
from netproxy.runner import BoundedFrequencyRunner

log = logging.getLogger("netpol")

BR_NF_SYSCTL = "/proc/sys/net/bridge/bridge-nf-call-iptables"


class Backend(Protocol):
    name: str

    def sync(self, model: PolicyModel, ch: Changes) -> None: ...
    def cleanup(self) -> None: ...
    def leftovers(self) -> list[str]: ...


def make_backend(mode: str, **kw: Any) -> Backend:
    if mode == "iptables":
        from netpol.iptables import IptablesBackend

        return IptablesBackend(**kw)
    if mode == "nftables":
        from netpol.nftables import NftablesBackend

        return NftablesBackend(**kw)
    raise ValueError(f"unknown mode {mode!r} (iptables or nftables)")


def ensure_bridge_netfilter() -> bool:
    """Bridged (same-node pod-to-pod) packets must traverse the IPv4 forward hook for policy to see them.

    Chosen over a bridge-family nft table because (1) the service proxy needs it anyway: without it a
    bridged pod → ClusterIP → pod packet never meets the ip-family DNAT, so policy on the real
    destination could not be checked in a bridge table either; (2) one hook point (ip forward, after
    DNAT) serves both modes, iptables included, which has no bridge-family equivalent with ipsets.
    The sysctl is per network namespace, so this changes only the namespace we run in."""
    try:
        with open(BR_NF_SYSCTL) as f:
            if f.read().strip() == "1":
                return False
        with open(BR_NF_SYSCTL, "w") as f:
            f.write("1")
        log.info("netpol: enabled net.bridge.bridge-nf-call-iptables "
                 "(same-node pod traffic crosses a bridge)")
        return True
    except FileNotFoundError:
        log.warning("netpol: br_netfilter is not loaded; same-node pod-to-pod traffic bypasses policy "
                    "(modprobe br_netfilter)")
        return False


@dataclasses.dataclass
class Stats:
    syncs: int = 0
    full_syncs: int = 0
    last_duration: float = 0.0
    last_sync_at: float = 0.0


class Enforcer:
    def __init__(self, backend: Backend, worker: NetnsWorker | None = None, node_name: str | None = None,
                 min_interval: float = 0.0, max_interval: float = 60.0, sources: int = 1) -> None:
        self.backend = backend
        self.worker = worker or NetnsWorker(None)
        self._own_worker = worker is None
        self.model = PolicyModel(node_name)
        self.stats = Stats()
        self.synced = asyncio.Event()
        self._pending_sources = sources
        self._runner = BoundedFrequencyRunner(self._periodic, min_interval, max_interval, name="netpol sync")
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ inputs (record only)
    def on_pod(self, key: str, obj: Mapping[str, Any] | None) -> None:
        self.model.set_pod(key, obj)
        self._kick()

    def on_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        self.model.set_namespace(name, labels)
        self._kick()

    def on_policy(self, key: str, obj: Mapping[str, Any] | None) -> None:
        self.model.set_policy(key, obj)
        self._kick()

    def source_synced(self) -> None:
        self._pending_sources -= 1
        self._kick()

    def _kick(self) -> None:
        if self._pending_sources <= 0:
            self._runner.run()

    # ------------------------------------------------------------------ the writer
    async def sync(self, full: bool = False) -> Changes | None:
        """Write what changed (everything with `full`); returns the changes written, None if nothing."""
        async with self._lock:
            if full:
                self.model.force_full()
            ch = self.model.take_changes()
            if ch.empty():
                return None
            t0 = time.perf_counter()
            try:
                if ch.full:
                    await asyncio.wrap_future(self.worker.submit(ensure_bridge_netfilter))
                await asyncio.wrap_future(self.worker.submit(self.backend.sync, self.model, ch))
            except BaseException:
                self.model.force_full()  # we no longer know what the kernel holds: rewrite it all next time
                raise
            self.stats.syncs += 1
            self.stats.full_syncs += ch.full
            self.stats.last_duration = time.perf_counter() - t0
            self.stats.last_sync_at = time.time()
            if ch.full:
                log.info("netpol: %s full sync, %d policies, %d pods in %.3fs", self.backend.name,
                         len(self.model.policies), len(self.model.pods), self.stats.last_duration)
            return ch

    async def _periodic(self, periodic: bool) -> None:
        if self._pending_sources > 0:
            return
        await self.sync(full=periodic)
        self.synced.set()

    async def run(self) -> None:
        """The runner loop until cancelled (syncs once every source has listed)."""
        await self._runner.loop()

    async def cleanup(self) -> None:
        await asyncio.wrap_future(self.worker.submit(self.backend.cleanup))

    async def leftovers(self) -> list[str]:
        return await asyncio.wrap_future(self.worker.submit(self.backend.leftovers))

    def close(self) -> None:
        if self._own_worker:
            self.worker.close()


def netns_exists(netns: str | None) -> bool:
    return netns is None or os.path.exists(netns if netns.startswith("/") else f"/run/netns/{netns}")

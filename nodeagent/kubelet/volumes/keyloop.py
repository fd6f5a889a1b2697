"""The loop the node's storage adapters share (the local-path and CSI provisioners, the CSI snapshotter):
informers feed keys into a de-duplicating queue, one worker syncs each key, a failed sync is logged and
retried at the next resync, and every object is looked at again each `resync` seconds — external-
provisioner's and csi-snapshotter's workqueue, without their rate limiter."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from nodeagent.client.informer import Store


class KeyLoop:
    """Subclasses set `informers`, `name`, `log`, and implement `sync(key)` and `poke_all()`."""

    name = "keyloop"
    resync = 15.0
    log = logging.getLogger("nodeagent.kubelet.volumes")
    informers: Sequence[Store] = ()

    def __init__(self) -> None:
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()

    def add(self, key: str) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self.queue.put_nowait(key)

    def poke_all(self) -> None:
        """Queue every object the loop cares about (the resync, and a change that concerns them all)."""
        raise NotImplementedError

    async def sync(self, key: str) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            for inf in self.informers:
                tg.create_task(inf.run(), name=f"{self.name}-{inf.resource.name}")
            for inf in self.informers:
                await inf.wait_synced()
            tg.create_task(self._resync(), name=f"{self.name}-resync")
            while True:
                key = await self.queue.get()
                self._queued.discard(key)
                try:
                    await self.sync(key)
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    self.log.warning("%s: %s failed, retrying in %ss: %s", self.name, key, self.resync, e)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.resync)
            self.poke_all()

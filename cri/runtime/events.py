"""GetContainerEvents: every container's created, started, stopped and deleted events, with the pod's and
the container's status at that moment, to each subscriber (a bounded queue: a slow one loses events,
never the runtime)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from cri.proto import api_pb2 as pb
from cri.runtime.core import RuntimeCore, now_ns
from cri.runtime.state import ContainerRecord


class EventVerbs(RuntimeCore):
    def _emit(self, c: ContainerRecord, kind: pb.ContainerEventType) -> None:
        if not self._subscribers:
            return
        ev = pb.ContainerEventResponse(container_id=c.id, container_event_type=kind, created_at=now_ns())
        s = self.sandboxes.get(c.sandbox_id)
        if s:
            ev.pod_sandbox_status.CopyFrom(self.sandbox_status(s))
        if kind != pb.CONTAINER_DELETED_EVENT:
            ev.containers_statuses.append(self.container_status(c))
        for q in self._subscribers:
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(ev)

    async def events(self) -> AsyncIterator[pb.ContainerEventResponse]:
        q: asyncio.Queue = asyncio.Queue(maxsize=1000)
        self._subscribers.append(q)
        try:
            while True:
                yield await q.get()
        finally:
            self._subscribers.remove(q)

"""Kubernetes Events from any component: what happened to an object, for `kubectl describe`.

`record` never blocks or fails its caller: events go to a bounded queue that one
writer task (owned by the component's TaskGroup via `run`) sends to the API.
Repeats of the same (object, type, reason, message) within ten minutes update
the existing Event's count and lastTimestamp instead of creating a new one, as
client-go's event correlator does. A full queue drops events, like client-go.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from nodeagent.api.times import rfc3339
from nodeagent.client.rest import Client, ClientError
from nodeagent.clock import REAL_CLOCK, Clock

log = logging.getLogger("nodeagent.events")

REPEAT_WINDOW = 600.0


def object_reference(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    ref = {"kind": obj.get("kind", ""), "apiVersion": obj.get("apiVersion", ""), "name": meta.get("name", ""),
           "uid": meta.get("uid", ""), "resourceVersion": meta.get("resourceVersion", "")}
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return ref


class EventRecorder:
    def __init__(self, client: Client, component: str, host: str = "", queue_size: int = 1000,
                 clock: Clock = REAL_CLOCK) -> None:
        self.client = client
        self.clock = clock
        self.component = component
        self.host = host
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(queue_size)
        self._seen: dict[tuple, tuple[str, str, int, float]] = {}  # key -> (namespace, name, count, when)
        self.dropped = 0

    def record(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Queue an Event about `obj` (type_ is "Normal" or "Warning")."""
        try:
            self._queue.put_nowait({"ref": object_reference(obj), "type": type_, "reason": reason,
                                    "message": message})
        except asyncio.QueueFull:
            self.dropped += 1

    async def flush(self) -> None:
        """Wait until every queued event has been sent (tests, shutdown)."""
        await self._queue.join()

    async def run(self) -> None:
        """The writer: owned by the component's TaskGroup, runs until cancelled."""
        while True:
            item = await self._queue.get()
            try:
                await self._send(item)
            except Exception as e:  # an event is best effort: never take the component down
                log.debug("event %s/%s not recorded: %s", item["ref"].get("name"), item["reason"], e)
            finally:
                self._queue.task_done()

    async def _send(self, item: dict[str, Any]) -> None:
        ref = item["ref"]
        ns = ref.get("namespace") or "default"
        key = (ref.get("uid"), ref.get("name"), ns, item["type"], item["reason"], item["message"])
        now = rfc3339(self.clock.now())
        seen = self._seen.get(key)
        if seen and self.clock.monotonic() - seen[3] < REPEAT_WINDOW:
            _, name, count, _ = seen
            try:
                await self.client.patch("events", name, {"count": count + 1, "lastTimestamp": now}, ns)
                self._seen[key] = (ns, name, count + 1, self.clock.monotonic())
                return
            except ClientError as e:
                if not e.not_found:
                    raise
        name = f"{ref.get('name', 'unknown')}.{time.time_ns():x}"
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": ref, "reason": item["reason"], "message": item["message"], "type": item["type"],
            "source": {"component": self.component, **({"host": self.host} if self.host else {})},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": self.component, "reportingInstance": self.host,
        }
        await self.client.create("events", body, ns)
        self._seen[key] = (ns, name, 1, self.clock.monotonic())
        if len(self._seen) > 4096:  # keep the correlator's memory bounded
            cutoff = self.clock.monotonic() - REPEAT_WINDOW
            self._seen = {k: v for k, v in self._seen.items() if v[3] >= cutoff}

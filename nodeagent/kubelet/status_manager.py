"""The kubelet's status manager (status_manager.go): pod workers set statuses, one loop writes them.

A pod worker's sync ends with `set(pod, status)`, which only records the status (the kubelet's own view,
`get`, the base of its next status) and never waits for the API. `run` writes each pod's newest status as
one PATCH of the status subresource (no GET first): several changes made before a write goes out become
one write, a status the API already holds is not written, one write per pod is in flight at a time, and a
failed write is retried with the newest status then. A burst of pod starts thus costs one status write per
pod, not one per sync, and the workers go on with their pods while the writes queue behind the kubelet's
API rate limit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from nodeagent.client.rest import Client, ClientError
from nodeagent.clock import REAL_CLOCK, Clock

log = logging.getLogger("nodeagent.kubelet.status")

Pod = dict[str, Any]
RETRY = 1.0  # seconds before a failed write is tried again
IN_FLIGHT = 16  # status writes sent at once (each pod has at most one)


class StatusManager:
    def __init__(self, client: Client, current: Callable[[str, str | None], Pod | None],
                 clock: Clock | None = None, in_flight: int = IN_FLIGHT) -> None:
        """`current(name, namespace)`: the API's pod as the kubelet's pod source last saw it (to skip a
        status the API already holds, and to drop a write for a pod that is gone or was replaced)."""
        self.client = client
        self.current = current
        self.clock = clock or REAL_CLOCK
        self.statuses: dict[str, dict[str, Any]] = {}  # uid → the kubelet's newest status of the pod
        self.writes = 0  # PATCHes sent (for the metrics and tests)
        self._posted: dict[str, dict[str, Any]] = {}  # uid → the last status the API accepted from us
        # uid → (name, namespace, the API object's uid or None for whichever holds the name) to write
        self._pending: dict[str, tuple[str, str | None, str | None]] = {}
        self._busy: set[str] = set()
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(in_flight)

    def get(self, uid: str) -> dict[str, Any] | None:
        return self.statuses.get(uid)

    def set(self, pod: Pod, status: dict[str, Any], mirror: bool = False) -> None:
        """The pod's newest status (kubelet SetPodStatus): written by `run` unless the API has it. `mirror`:
        a static pod, whose status goes to its mirror pod (the API object of its name, another uid)."""
        m = pod["metadata"]
        uid = m["uid"]
        self.statuses[uid] = status
        if self._posted.get(uid) == status and uid not in self._busy:
            self._pending.pop(uid, None)
            return
        self._pending[uid] = (m["name"], m.get("namespace"), None if mirror else uid)
        self._wake.set()

    def forget(self, uid: str) -> None:
        """The pod is terminated: nothing more is written for it."""
        self.statuses.pop(uid, None)
        self._posted.pop(uid, None)
        self._pending.pop(uid, None)

    def pending(self) -> int:
        return len(self._pending) + len(self._busy)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            while True:
                await self._wake.wait()
                self._wake.clear()
                for uid in [u for u in self._pending if u not in self._busy]:
                    await self._slots.acquire()
                    if uid not in self._pending:  # forgotten or written meanwhile
                        self._slots.release()
                        continue
                    self._busy.add(uid)
                    target = self._pending.pop(uid)
                    tg.create_task(self._write(uid, *target), name=f"pod-status-{uid[:8]}")

    async def _write(self, uid: str, name: str, namespace: str | None, object_uid: str | None) -> None:
        retry = False
        try:
            status = self.statuses.get(uid)
            cur = self.current(name, namespace)
            replaced = cur is not None and object_uid and cur["metadata"].get("uid") != object_uid
            if status is None or replaced or self._posted.get(uid) == status:
                return  # forgotten, the name now belongs to another pod, or written meanwhile
            if uid not in self._posted and cur is not None and cur.get("status") == status:
                self._posted[uid] = status  # the API holds it already (e.g. after a kubelet restart)
                return
            try:
                self.writes += 1
                await self.client.patch("pods", name, {"status": status}, namespace=namespace,
                                        subresource="status")
            except ClientError as e:
                if not e.not_found:
                    log.warning("status of pod %s/%s not written (retried in %gs): %s", namespace, name,
                                RETRY, e.message)
                    retry = True
                return
            except Exception as e:  # the connection: the write is retried all the same
                log.warning("status of pod %s/%s not written (retried in %gs): %s", namespace, name, RETRY, e)
                retry = True
                return
            if uid in self.statuses:
                self._posted[uid] = status
        finally:
            self._busy.discard(uid)
            self._slots.release()
            if retry:
                await self.clock.sleep(RETRY)
                if uid in self.statuses:
                    self._pending.setdefault(uid, (name, namespace, object_uid))
            if uid in self._pending:
                self._wake.set()

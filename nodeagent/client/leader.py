"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

`LeaderElector.run(work)` acquires the lease (create, or take over an expired one with a resourceVersion
precondition), renews it every `retry_period`, and runs `work()` while it leads; losing the lease (no
successful renewal within `renew_deadline`) cancels `work` and returns to candidacy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from nodeagent.api import times
from nodeagent.client.rest import Client, ClientError
from nodeagent.clock import REAL_CLOCK, Clock, utcnow

log = logging.getLogger("nodeagent.client.leader")


class LeaderElector:
    def __init__(self, client: Client, name: str, identity: str, namespace: str = "kube-system",
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 clock: Clock = REAL_CLOCK) -> None:
        self.client, self.name, self.identity, self.namespace = client, name, identity, namespace
        self.clock = clock
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.is_leader = False

    async def try_acquire_or_renew(self) -> bool:
        now = utcnow(self.clock)
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_duration),
                "renewTime": times.format_micro(now)}
        try:
            lease = await self.client.get("leases", self.name, self.namespace)
        except ClientError as e:
            if not e.not_found:
                raise
            spec["acquireTime"] = times.format_micro(now)
            spec["leaseTransitions"] = 0
            try:
                await self.client.create("leases", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                                    "metadata": {"name": self.name,
                                                                 "namespace": self.namespace},
                                                    "spec": spec}, self.namespace)
                return True
            except ClientError as e2:
                if e2.already_exists:
                    return False
                raise
        cur = lease.get("spec") or {}
        holder = cur.get("holderIdentity")
        renew = times.parse_time(cur.get("renewTime")) or times.parse_time(cur.get("acquireTime"))
        dur = cur.get("leaseDurationSeconds") or self.lease_duration
        if holder and holder != self.identity and renew and (now - renew).total_seconds() < dur:
            return False
        if holder == self.identity:
            spec["acquireTime"] = cur.get("acquireTime") or times.format_micro(now)
            spec["leaseTransitions"] = cur.get("leaseTransitions", 0)
        else:
            spec["acquireTime"] = times.format_micro(now)
            spec["leaseTransitions"] = cur.get("leaseTransitions", 0) + 1
        lease["spec"] = spec
        try:
            await self.client.update("leases", lease, self.namespace)
            return True
        except ClientError as e:
            if e.conflict:
                return False
            raise

    async def run(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Forever: wait to lead, then run `work` until it returns or the lease is lost."""
        while True:
            await self._until_acquired()
            self.is_leader = True
            log.info("%s: became leader of %s/%s", self.identity, self.namespace, self.name)
            task = asyncio.get_running_loop().create_task(work())
            try:
                last_ok = self.clock.monotonic()
                while not task.done():
                    await self.clock.sleep(self.retry_period)
                    if await self._attempt():
                        last_ok = self.clock.monotonic()
                    elif self.clock.monotonic() - last_ok > self.renew_deadline:
                        log.warning("%s: lost lease %s", self.identity, self.name)
                        break
            finally:
                self.is_leader = False
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            if task.done() and not task.cancelled():
                if (exc := task.exception()) is None:
                    return
                log.error("%s: the work under lease %s/%s failed; campaigning again: %s", self.identity,
                          self.namespace, self.name, exc, exc_info=exc)

    async def _until_acquired(self) -> None:
        while True:
            if await self._attempt():
                return
            await self.clock.sleep(self.retry_period)

    async def _attempt(self) -> bool:
        try:
            return await self.try_acquire_or_renew()
        except ClientError as e:
            log.debug("lease %s: %s", self.name, e)
            return False

    async def release(self) -> None:
        """Give the lease up (on clean shutdown) so another candidate takes over at once."""
        with contextlib.suppress(ClientError):
            lease = await self.client.get("leases", self.name, self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["renewTime"] = None
                await self.client.update("leases", lease, self.namespace)

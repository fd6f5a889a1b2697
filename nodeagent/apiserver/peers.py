"""Apiserver identity leases and the endpoint reconciler for several servers sharing one store (etcd).

Each server keeps a Lease `apiserver-<hash>` in kube-system (label apiserver.kubernetes.io/identity),
renewed every third of its duration, with its address in an annotation. The `kubernetes` Endpoints list
exactly the servers whose lease is live; expired leases are removed by whichever server sees them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import uuid
from typing import Any

from nodeagent.api.resources import builtin
from nodeagent.api.times import rfc3339
from nodeagent.apiserver.registry import Registry
from nodeagent.clock import REAL_CLOCK, Clock, utcnow
from nodeagent.store import base as store_base

log = logging.getLogger("nodeagent.apiserver.peers")
LEASES = builtin("coordination.k8s.io", "v1", "leases")
IDENTITY_LABEL = "apiserver.kubernetes.io/identity"
ENDPOINT_ANNOTATION = "nodeagent.io/apiserver-endpoint"


def _micro(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class PeerLeases:
    def __init__(self, registry: Registry, ip: str, port: int, duration: int = 15,
                 clock: Clock = REAL_CLOCK) -> None:
        self.registry = registry
        self.clock = clock
        self.ip, self.port, self.duration = ip, port, duration
        self.name = "apiserver-" + hashlib.sha256(f"{ip}:{port}".encode()).hexdigest()[:12]

    async def renew(self) -> None:
        store = self.registry.store
        key = LEASES.key("kube-system", self.name)
        now = _micro(utcnow(self.clock))
        try:
            cur = await store.get(key)
            cur.setdefault("spec", {})["renewTime"] = now
            cur["spec"]["leaseDurationSeconds"] = self.duration
            await store.update(key, cur, int(cur["metadata"]["resourceVersion"]))
        except store_base.NotFound:
            obj = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": self.name, "namespace": "kube-system", "uid": str(uuid.uuid4()),
                                "creationTimestamp": rfc3339(self.clock.now()),
                                "labels": {IDENTITY_LABEL: "kube-apiserver"},
                                "annotations": {ENDPOINT_ANNOTATION: f"{self.ip}:{self.port}"}},
                   "spec": {"holderIdentity": self.name, "leaseDurationSeconds": self.duration,
                            "acquireTime": now, "renewTime": now}}
            try:
                await store.create(key, obj)
            except store_base.AlreadyExists:
                pass
        except store_base.Conflict:
            pass

    async def release(self) -> None:
        try:
            await self.registry.store.delete(LEASES.key("kube-system", self.name))
        except store_base.StoreError:
            pass

    async def live_endpoints(self) -> list[tuple[str, int]]:
        """(ip, port) of every server with a live lease; expired leases are deleted on the way."""
        store = self.registry.store
        items, _ = await store.list(LEASES.key_prefix("kube-system"))
        now = utcnow(self.clock)
        out = []
        for lease in items:
            m = lease.get("metadata") or {}
            if (m.get("labels") or {}).get(IDENTITY_LABEL) != "kube-apiserver":
                continue
            ep = (m.get("annotations") or {}).get(ENDPOINT_ANNOTATION, "")
            spec = lease.get("spec") or {}
            try:
                renew = dt.datetime.fromisoformat(spec["renewTime"].replace("Z", "+00:00"))
            except (KeyError, ValueError, AttributeError):
                continue
            if (now - renew).total_seconds() > spec.get("leaseDurationSeconds", self.duration):
                try:
                    await store.delete(LEASES.key("kube-system", m["name"]), int(m["resourceVersion"]))
                    log.info("removed expired apiserver lease %s (%s)", m["name"], ep)
                except store_base.StoreError:
                    pass
                continue
            ip, _, port = ep.rpartition(":")
            if ip and port.isdigit():
                out.append((ip, int(port)))
        if (self.ip, self.port) not in out:
            out.append((self.ip, self.port))  # we are alive even if our renewal is in flight
        return sorted(out)


def endpoint_subsets(endpoints: list[tuple[str, int]]) -> list[dict[str, Any]]:
    by_port: dict[int, list[str]] = {}
    for ip, port in endpoints:
        by_port.setdefault(port, []).append(ip)
    return [{"addresses": [{"ip": ip} for ip in sorted(set(ips))],
             "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}
            for port, ips in sorted(by_port.items())]

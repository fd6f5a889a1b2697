"""Change trackers: watch handlers record (first prev, latest cur) per key; no-ops vanish.

They never touch the kernel (kube-proxy's servicechangetracker / endpointschangetracker):
the sync function takes the pending changes, applies them to `ProxyState` and
gets back which Service ports changed, so a backend rewrites only those.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

from netproxy.model import (
    Endpoint,
    ServicePort,
    ServicePortName,
    merge_endpoints,
    parse_endpoint_slice,
    parse_endpoints,
    parse_service,
    service_key,
    slice_service_key,
)

PortEndpoints = dict[tuple[str, str], tuple[Endpoint, ...]]
Ports = dict[ServicePortName, ServicePort]  # one Service's ports


class ServiceChangeTracker:
    """Pending Service changes keyed by namespace/name: (as applied, as now)."""

    def __init__(self) -> None:
        self._items: dict[str, list[Ports]] = {}
        self._lock = threading.Lock()

    def update(self, prev: Mapping[str, Any] | None, cur: Mapping[str, Any] | None) -> bool:
        """Record one add (prev None), update, or delete (cur None). True if a change is pending."""
        obj = cur or prev
        if not obj:
            return False
        key = service_key(obj)
        new = parse_service(cur)
        with self._lock:
            item = self._items.get(key)
            if item is None:
                item = self._items[key] = [parse_service(prev), new]
            else:
                item[1] = new
            if item[0] == item[1]:
                del self._items[key]
            return bool(self._items)

    def pending(self) -> int:
        with self._lock:
            return len(self._items)

    def take(self) -> dict[str, tuple[Ports, Ports]]:
        with self._lock:
            items, self._items = self._items, {}
        return {k: (v[0], v[1]) for k, v in items.items()}


class EndpointsChangeTracker:
    """Pending endpoint changes per Service, from EndpointSlices (merged) or v1 Endpoints."""

    def __init__(self) -> None:
        self._slices: dict[str, dict[str, PortEndpoints]] = {}  # service -> slice name -> parsed
        self._items: dict[str, list[PortEndpoints]] = {}
        self._lock = threading.Lock()

    def _record(self, key: str, before: PortEndpoints, after: PortEndpoints) -> bool:
        item = self._items.get(key)
        if item is None:
            item = self._items[key] = [before, after]
        else:
            item[1] = after
        if item[0] == item[1]:
            del self._items[key]
        return bool(self._items)

    def update_slice(self, obj: Mapping[str, Any], removed: bool = False) -> bool:
        """Record an EndpointSlice add/update (or its deletion with removed=True)."""
        key = slice_service_key(obj)
        if key is None:
            return False
        name = (obj.get("metadata") or {}).get("name") or ""
        with self._lock:
            slices = self._slices.setdefault(key, {})
            before = merge_endpoints(slices.values())
            if removed:
                slices.pop(name, None)
            else:
                slices[name] = parse_endpoint_slice(obj)
            if not slices:
                del self._slices[key]
            after = merge_endpoints(slices.values()) if slices else {}
            return self._record(key, before, after)

    def update_endpoints(self, prev: Mapping[str, Any] | None, cur: Mapping[str, Any] | None) -> bool:
        """Record a v1 Endpoints add/update/delete (the pre-EndpointSlice source)."""
        obj = cur or prev
        if not obj:
            return False
        with self._lock:
            return self._record(service_key(obj), merge_endpoints([parse_endpoints(prev)]),
                                merge_endpoints([parse_endpoints(cur)]))

    def pending(self) -> int:
        with self._lock:
            return len(self._items)

    def take(self) -> dict[str, tuple[PortEndpoints, PortEndpoints]]:
        with self._lock:
            items, self._items = self._items, {}
        return {k: (v[0], v[1]) for k, v in items.items()}


@dataclasses.dataclass
class Changes:
    """What one sync has to do beyond the unchanged state."""

    ports: set[ServicePortName] = dataclasses.field(default_factory=set)  # changed or deleted ports
    deleted: dict[ServicePortName, ServicePort] = dataclasses.field(default_factory=dict)
    # UDP conntrack to clear after the rules are written:
    stale_endpoints: list[tuple[ServicePort, Endpoint]] = dataclasses.field(default_factory=list)
    stale_services: list[ServicePort] = dataclasses.field(default_factory=list)  # got their first endpoint

    def merge(self, other: Changes) -> None:
        self.ports |= other.ports
        self.deleted.update(other.deleted)
        for sp in other.ports:
            if sp not in other.deleted:
                self.deleted.pop(sp, None)
        self.stale_endpoints += other.stale_endpoints
        self.stale_services += other.stale_services

    def __bool__(self) -> bool:
        return bool(self.ports or self.stale_endpoints or self.stale_services)


def _port_name(service: str, key: tuple[str, str]) -> ServicePortName:
    ns, _, name = service.partition("/")
    return ServicePortName(ns, name, key[0], key[1])


class ProxyState:
    """The applied Service ports and endpoints: what the rules should say after a sync."""

    def __init__(self) -> None:
        self.services: dict[ServicePortName, ServicePort] = {}
        self.endpoints: dict[ServicePortName, tuple[Endpoint, ...]] = {}

    def apply(self, svc: ServiceChangeTracker, eps: EndpointsChangeTracker) -> Changes:
        ch = Changes()
        for _, (before, after) in svc.take().items():
            for spn in before.keys() - after.keys():
                ch.deleted[spn] = self.services.pop(spn, before[spn])
                ch.ports.add(spn)
            for spn, sp in after.items():
                if self.services.get(spn) != sp:
                    prev = self.services.get(spn)
                    if prev is not None and prev.protocol == "UDP" and prev.cluster_ip != sp.cluster_ip:
                        ch.stale_services.append(prev)
                    self.services[spn] = sp
                    ch.ports.add(spn)
        for service, (eps_before, eps_after) in eps.take().items():
            for key in eps_before.keys() | eps_after.keys():
                spn = _port_name(service, key)
                old, new = eps_before.get(key, ()), eps_after.get(key, ())
                if old == new:
                    continue
                ch.ports.add(spn)
                if new:
                    self.endpoints[spn] = new
                else:
                    self.endpoints.pop(spn, None)
                if spn.protocol == "UDP":
                    udp = self.services.get(spn) or ch.deleted.get(spn)
                    if udp is None:
                        continue
                    now_ready = {str(e) for e in new if e.ready or e.serving}
                    ch.stale_endpoints += [(udp, e) for e in old
                                           if (e.ready or e.serving) and str(e) not in now_ready]
                    if not any(e.ready for e in old) and any(e.ready for e in new):
                        ch.stale_services.append(udp)
        for spn in ch.deleted:  # a deleted UDP service: clear flows to all its endpoints
            sp = ch.deleted[spn]
            if sp.protocol == "UDP":
                ch.stale_endpoints += [(sp, e) for e in self.endpoints.get(spn, ())]
        return ch

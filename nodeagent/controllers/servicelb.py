"""LoadBalancer address allocation, pure: a Service and what the others hold → its addresses and an event.

MetalLB's controller (convergeService) over one pool from `--service-lb-pool`: a Service keeps the address
it holds while that is still allowed; `spec.loadBalancerIP` asks for one address of the pool; otherwise
the first free address is taken (one already shared under the same sharing key first). An address is
shared only under MetalLB's `allow-shared-ip` rules: the same key on both, no port in common, and with
Local traffic policy the same pods. The allocations live in the Services' status only, so a restarted
controller rebuilds them from the objects.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.api import service_lb

NORMAL, WARNING = "Normal", "Warning"


@dataclasses.dataclass(frozen=True)
class Holder:
    """One Service holding an address: what sharing it depends on."""

    key: str
    sharing: str
    backend: str
    ports: frozenset[tuple[str, int]]
    created: str = ""

    @classmethod
    def of(cls, svc: Mapping[str, Any]) -> Holder:
        return cls(service_lb.key(svc), service_lb.sharing_key(svc), service_lb.backend_key(svc),
                   service_lb.ports(svc), str((svc.get("metadata") or {}).get("creationTimestamp") or ""))


@dataclasses.dataclass(frozen=True)
class Decision:
    ips: tuple[str, ...] | None  # the status addresses to write; None: not ours, leave the status alone
    event: tuple[str, str, str] | None = None  # (type, reason, message)


def usage(services: Iterable[Mapping[str, Any]], pool: service_lb.Pool) -> dict[str, list[Holder]]:
    """{ip: the Services of ours holding it} from the Services' status."""
    out: dict[str, list[Holder]] = {}
    for s in services:
        if service_lb.is_ours(s) and not (s.get("metadata") or {}).get("deletionTimestamp"):
            for ip in service_lb.ingress_ips(s):
                if service_lb.in_pool(pool, ip):
                    out.setdefault(ip, []).append(Holder.of(s))
    return out


def sharing_conflict(ip: str, me: Holder, holders: Iterable[Holder]) -> str | None:
    """Why `me` may not use `ip` beside its other holders (MetalLB's checkSharing); None if it may."""
    q = json.dumps
    for h in holders:
        if h.key == me.key:
            continue
        held = f"{q(ip)} is in use by {q(h.key)}"
        if not h.sharing:
            return f"{held}: existing service does not allow sharing"
        if not me.sharing:
            return f"{held}: new service does not allow sharing"
        if h.sharing != me.sharing:
            return f"{held}: sharing key {q(me.sharing)} does not match existing sharing key {q(h.sharing)}"
        if h.backend != me.backend:
            return f"{held}: backend key {q(me.backend)} does not match existing sharing key {q(h.backend)}"
        common = sorted(me.ports & h.ports)
        if common:
            proto, port = common[0]
            return f"port {proto}/{port} is already in use on {json.dumps(ip)} by {json.dumps(h.key)}"
    return None


def _earlier(a: Holder, b: Holder) -> bool:
    return (a.created, a.key) < (b.created, b.key)


def decide(svc: Mapping[str, Any], used: Mapping[str, list[Holder]], pool: service_lb.Pool) -> Decision:
    """What `svc`'s status.loadBalancer should say, given the addresses the others hold."""
    key = service_lb.key(svc)
    spec = svc.get("spec") or {}
    have = service_lb.ingress_ips(svc)
    if not service_lb.is_load_balancer(svc):
        return Decision(() if have else None)  # type changed: the address goes back to the pool
    if not service_lb.is_ours(svc):
        return Decision(None)  # another load balancer's class: its status is not ours to write
    if not pool:
        return Decision((), (WARNING, "AllocationFailed",
                             f"Failed to allocate IP for {json.dumps(key)}: no address pool is configured "
                             "(start the server with --service-lb-pool CIDR[,CIDR])"))
    if not spec.get("clusterIP") or spec.get("clusterIP") == "None":
        return Decision((), (WARNING, "AllocationFailed", f"Failed to allocate IP for {json.dumps(key)}: "
                                                         "the Service has no cluster IP"))
    me = Holder.of(svc)

    def fail(why: str) -> Decision:
        return Decision((), (WARNING, "AllocationFailed",
                             f"Failed to allocate IP for {json.dumps(key)}: {why}"))

    def conflict(ip: str) -> str | None:
        others = [h for h in used.get(ip, []) if h.key != key]
        # two holders of one address that may not share (e.g. a status written by hand): the earlier
        # Service keeps it
        if have and ip in have and all(_earlier(me, h) for h in others):
            return None
        return sharing_conflict(ip, me, others)

    want = service_lb.requested_ip(svc)
    if want:
        if not service_lb.in_pool(pool, want):
            return fail(f'["{want}"] is not allowed in config')
        why = conflict(want)
        if why:
            return fail(why)
        return _assigned(have, (want,))
    if len(have) == 1 and service_lb.in_pool(pool, have[0]) and conflict(have[0]) is None:
        return Decision(have)
    # a free address: first one already shared under our key, then any unused one
    if me.sharing:
        for ip, holders in used.items():
            if service_lb.in_pool(pool, ip) and holders and conflict(ip) is None:
                return _assigned(have, (ip,))
    for ip in service_lb.pool_addresses(pool):
        if not [h for h in used.get(ip, []) if h.key != key]:
            return _assigned(have, (ip,))
    return fail("no available IPs")


def _assigned(have: tuple[str, ...], ips: tuple[str, ...]) -> Decision:
    if have == ips:
        return Decision(ips)
    return Decision(ips, (NORMAL, "IPAllocated", f"Assigned IP {json.dumps(list(ips))}"))

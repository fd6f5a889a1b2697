"""Which node may announce an address (pure): MetalLB's layer-2 candidates, and which of them goes first.

One Lease per address (`nodeagent-lb-<ip>`): Services sharing an address share its owner, so one node
answers ARP for it. A node is a candidate for an address unless it carries the
`node.kubernetes.io/exclude-from-external-load-balancers` label; with `externalTrafficPolicy: Local` it
must also have a ready endpoint of every Service on that address (its traffic is not forwarded to other
nodes, so a node without one would black-hole it).

Addresses are spread over the nodes as MetalLB spreads them: the Ready candidates are ranked by a hash of
(node, address), and a free or expired Lease is taken by the first of them (the expired holder left out,
so a dead owner's address goes straight to the next); any other candidate takes it only once it has
stayed free for a whole lease duration (the preferred node may be gone without its Node saying so yet).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.api import service_lb, times

EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
LEASE_PREFIX = "nodeagent-lb-"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def lease_name(ip: str) -> str:
    return LEASE_PREFIX + ip


def by_address(services: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """{ip: the Services of ours announcing it}."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for s in services:
        if service_lb.is_ours(s) and not (s.get("metadata") or {}).get("deletionTimestamp"):
            for ip in service_lb.ingress_ips(s):
                out.setdefault(ip, []).append(s)
    return out


def has_local_ready_endpoint(slices: Iterable[Mapping[str, Any]], node: str) -> bool:
    for sl in slices:
        for ep in sl.get("endpoints") or []:
            cond = ep.get("conditions") or {}
            if ep.get("nodeName") == node and cond.get("ready", True) is not False:
                return True
    return False


def eligible(node: Mapping[str, Any] | None, services: Iterable[Mapping[str, Any]],
             slices_of: Mapping[str, list[Mapping[str, Any]]], node_name: str) -> tuple[bool, str]:
    """(may this node announce the address of `services`, why not)."""
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    if EXCLUDE_LABEL in labels:
        return False, f"node carries {EXCLUDE_LABEL}"
    for s in services:
        if (s.get("spec") or {}).get("externalTrafficPolicy") == "Local" and \
                not has_local_ready_endpoint(slices_of.get(service_lb.key(s), []), node_name):
            return False, f"no ready local endpoint of {service_lb.key(s)} (externalTrafficPolicy: Local)"
    return True, ""


def slices_by_service(slices: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for sl in slices:
        meta = sl.get("metadata") or {}
        svc = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if svc:
            out.setdefault(f"{meta.get('namespace') or 'default'}/{svc}", []).append(sl)
    return out


def node_ready(node: Mapping[str, Any]) -> bool:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def ranking(ip: str, candidates: Iterable[str]) -> list[str]:
    """The candidates in the order they should own `ip` (the same order on every node)."""
    return sorted(set(candidates), key=lambda n: (hashlib.sha256(f"{n}#{ip}".encode()).hexdigest(), n))


def lease_holder(lease: Mapping[str, Any] | None, now: dt.datetime) -> tuple[str | None, bool]:
    """(the Lease's holder, whether its hold is still live at `now`)."""
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity") or None
    renew = times.parse_time(spec.get("renewTime")) or times.parse_time(spec.get("acquireTime"))
    if holder is None or renew is None:
        return holder, False
    return holder, (now - renew).total_seconds() < float(spec.get("leaseDurationSeconds") or 0)

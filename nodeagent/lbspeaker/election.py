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

from nodeagent.api import times
from nodeagent.api.service_lb import (  # noqa: F401  (shared with the BGP announcer in nodenet)
    EXCLUDE_LABEL,
    SERVICE_NAME_LABEL,
    by_address,
    eligible,
    has_local_ready_endpoint,
    slices_by_service,
)

LEASE_PREFIX = "nodeagent-lb-"


def lease_name(ip: str) -> str:
    return LEASE_PREFIX + ip


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

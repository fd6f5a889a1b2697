"""`status.loadBalancer` of an Ingress or a Service, written through one helper (the Ingress controller
and the LoadBalancer service controller use it): the same shape, compared before it is written, so
an unchanged status costs no write."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from nodeagent.client.rest import Client


def load_balancer_ingress(addresses: Iterable[str]) -> list[dict[str, Any]]:
    """`[{ip: …}]` for addresses, `[{hostname: …}]` for names; sorted, no repeats."""
    out = []
    for a in sorted(set(addresses)):
        try:
            ipaddress.ip_address(a)
        except ValueError:
            out.append({"hostname": a})
        else:
            out.append({"ip": a})
    return out


async def set_load_balancer_status(client: Client, resource: str, obj: dict[str, Any],
                                   addresses: Iterable[str]) -> bool:
    """Make `obj`'s status.loadBalancer.ingress list `addresses`; True if it was written."""
    want = load_balancer_ingress(addresses)
    have = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    # compared by address only: the apiserver adds fields of its own (a Service's ipMode: VIP)
    if [{k: v for k, v in i.items() if k in ("ip", "hostname")} for i in have] == want:
        return False
    meta = obj["metadata"]
    await client.patch(resource, meta["name"], {"status": {"loadBalancer": {"ingress": want or None}}},
                       meta.get("namespace"), subresource="status")
    return True

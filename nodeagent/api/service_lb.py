"""What a `type: LoadBalancer` Service asks of nodeagent's load balancer, read one way by every part.

The service controller allocates addresses (`status.loadBalancer.ingress[].ip`); announcers (the L2
speaker here, a BGP speaker elsewhere) read the same facts through `announced` and never allocate:
allocation and announcement meet only through the Service objects.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

# spec.loadBalancerClass of Services we serve besides the unset class (k3s: io.cattle.k3s/servicelb …)
LOAD_BALANCER_CLASS = "nodeagent.io/service-lb"
# MetalLB's address-sharing annotation (both spellings MetalLB reads), honoured with its rules
SHARED_IP_ANNOTATIONS = ("metallb.io/allow-shared-ip", "metallb.universe.tf/allow-shared-ip")

Pool = tuple[ipaddress.IPv4Network, ...]


def parse_pool(text: str) -> Pool:
    """`--service-lb-pool CIDR[,CIDR]` (also MetalLB's `FIRST-LAST` ranges); ValueError names the bad one."""
    out: list[ipaddress.IPv4Network] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = (ipaddress.IPv4Address(x.strip()) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError(f"{hi} is before {lo}")
                out.extend(ipaddress.summarize_address_range(lo, hi))
            else:
                out.append(ipaddress.IPv4Network(part, strict=False))
        except ValueError as e:
            raise ValueError(f"--service-lb-pool {part!r}: not an IPv4 CIDR or FIRST-LAST range ({e})") \
                from None
    return tuple(out)


def pool_addresses(pool: Pool) -> Iterable[str]:
    """Every address of the pool in order (all of a CIDR, as MetalLB without avoidBuggyIPs)."""
    seen: set[str] = set()
    for net in pool:
        for a in net:  # a network iterates over all its addresses, network and broadcast too
            s = str(a)
            if s not in seen:
                seen.add(s)
                yield s


def in_pool(pool: Pool, ip: str) -> bool:
    try:
        addr = ipaddress.IPv4Address(ip)
    except ValueError:
        return False
    return any(addr in net for net in pool)


def key(svc: Mapping[str, Any]) -> str:
    meta = svc.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def is_load_balancer(svc: Mapping[str, Any]) -> bool:
    return ((svc.get("spec") or {}).get("type") or "ClusterIP") == "LoadBalancer"


def is_ours(svc: Mapping[str, Any]) -> bool:
    """A LoadBalancer Service of the unset class or of ours (another class belongs to another LB)."""
    cls = (svc.get("spec") or {}).get("loadBalancerClass")
    return is_load_balancer(svc) and cls in (None, "", LOAD_BALANCER_CLASS)


def ingress_ips(svc: Mapping[str, Any]) -> tuple[str, ...]:
    """The IPv4 addresses in status.loadBalancer.ingress."""
    out = []
    for i in ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
        ip = (i or {}).get("ip")
        try:
            if ip and isinstance(ipaddress.ip_address(ip), ipaddress.IPv4Address):
                out.append(ip)
        except ValueError:
            continue
    return tuple(dict.fromkeys(out))


def announced(services: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    """{"ns/name": its allocated IPs} for every Service of ours with an address: what to announce."""
    return {key(s): ips for s in services if is_ours(s) and (ips := ingress_ips(s))}


def sharing_key(svc: Mapping[str, Any]) -> str:
    ann = (svc.get("metadata") or {}).get("annotations") or {}
    return next((ann[a] for a in SHARED_IP_ANNOTATIONS if ann.get(a)), "")


def backend_key(svc: Mapping[str, Any]) -> str:
    """MetalLB's BackendKey: Services sharing an IP with Local traffic policy must select the same pods
    (one node answers for the IP, so it must have the endpoints of all of them)."""
    spec = svc.get("spec") or {}
    if spec.get("externalTrafficPolicy") != "Local":
        return ""
    return ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))


def ports(svc: Mapping[str, Any]) -> frozenset[tuple[str, int]]:
    return frozenset(((p.get("protocol") or "TCP"), int(p.get("port") or 0))
                     for p in (svc.get("spec") or {}).get("ports") or [])


def requested_ip(svc: Mapping[str, Any]) -> str:
    """spec.loadBalancerIP (deprecated upstream, still what users and MetalLB honour); "" if unset."""
    return str((svc.get("spec") or {}).get("loadBalancerIP") or "")


# -- who may announce an address (MetalLB's speakers: layer 2 here, BGP in nodenet) -------------------------

EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def by_address(services: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """{ip: the Services of ours announcing it}."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for s in services:
        if is_ours(s) and not (s.get("metadata") or {}).get("deletionTimestamp"):
            for ip in ingress_ips(s):
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
                not has_local_ready_endpoint(slices_of.get(key(s), []), node_name):
            return False, f"no ready local endpoint of {key(s)} (externalTrafficPolicy: Local)"
    return True, ""


def slices_by_service(slices: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for sl in slices:
        meta = sl.get("metadata") or {}
        svc = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if svc:
            out.setdefault(f"{meta.get('namespace') or 'default'}/{svc}", []).append(sl)
    return out

"""Service and endpoint facts the proxiers need, parsed once from Kubernetes JSON shapes.

Everything here is immutable and comparable, so the change trackers can drop
no-op updates by plain equality and the proxiers can diff old and new state.
Inputs are plain dicts in the core/v1 Service, discovery.k8s.io/v1
EndpointSlice and v1 Endpoints shapes.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
PROTOCOLS = ("TCP", "UDP", "SCTP")


@dataclasses.dataclass(frozen=True, order=True)
class ServicePortName:
    """One port of one Service: the unit a proxier programs (kube-proxy's ServicePortName)."""

    namespace: str
    name: str
    port: str  # the port's name; "" for a Service's single unnamed port
    protocol: str = "TCP"

    @property
    def service(self) -> str:
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:  # kube-proxy's String(): ns/name[:port]
        return self.service + (f":{self.port}" if self.port else "")


@dataclasses.dataclass(frozen=True)
class ServicePort:
    """What a Service port asks of the data plane."""

    name: ServicePortName
    cluster_ip: str | None  # None for headless (no proxy rules)
    port: int
    protocol: str
    node_port: int = 0
    external_ips: tuple[str, ...] = ()
    load_balancer_ips: tuple[str, ...] = ()
    affinity_timeout: int = 0  # seconds; 0 = no ClientIP affinity
    external_local: bool = False  # externalTrafficPolicy: Local
    internal_local: bool = False  # internalTrafficPolicy: Local
    type: str = "ClusterIP"
    health_check_node_port: int = 0  # LoadBalancer with Local policy: kube-proxy's service health check
    source_ranges: tuple[str, ...] = ()  # loadBalancerSourceRanges (LB IPs only)

    @property
    def externally_accessible(self) -> bool:
        return bool(self.node_port or self.external_ips or self.load_balancer_ips)

    @property
    def uses_local_external(self) -> bool:
        return self.external_local and self.externally_accessible


@dataclasses.dataclass(frozen=True, order=True)
class Endpoint:
    """One backend address:port of a Service port, with its readiness conditions."""

    ip: str
    port: int
    ready: bool = True
    serving: bool = True
    terminating: bool = False
    node_name: str | None = None

    def __str__(self) -> str:  # kube-proxy's endpoint string, part of the KUBE-SEP hash
        return f"{self.ip}:{self.port}"

    def is_local(self, node_name: str | None) -> bool:
        return node_name is not None and self.node_name == node_name


def _ipv4(values: Iterable[Any]) -> tuple[str, ...]:
    out = []
    for v in values:
        try:
            if isinstance(ipaddress.ip_address(str(v)), ipaddress.IPv4Address):
                out.append(str(v))
        except ValueError:
            continue
    return tuple(dict.fromkeys(out))


def _source_ranges(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """loadBalancerSourceRanges as normalized IPv4 CIDRs (kube-proxy ignores the other family's)."""
    out = []
    for c in spec.get("loadBalancerSourceRanges") or []:
        try:
            net = ipaddress.ip_network(str(c).strip(), strict=False)
        except ValueError:
            continue
        if isinstance(net, ipaddress.IPv4Network):
            out.append(str(net))
    return tuple(dict.fromkeys(out))


def parse_service(obj: Mapping[str, Any] | None) -> dict[ServicePortName, ServicePort]:
    """A core/v1 Service → its proxyable ports; {} for None, ExternalName and unsupported families."""
    if not obj:
        return {}
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    ns, name = meta.get("namespace") or "default", meta.get("name") or ""
    svc_type = spec.get("type") or "ClusterIP"
    if svc_type == "ExternalName":
        return {}
    cluster_ip = spec.get("clusterIP") or None
    if cluster_ip in ("None", ""):
        cluster_ip = None
    elif cluster_ip is not None and not _ipv4([cluster_ip]):
        return {}  # IPv6-only: this proxy programs IPv4
    affinity = 0
    if spec.get("sessionAffinity") == "ClientIP":
        cfg = ((spec.get("sessionAffinityConfig") or {}).get("clientIP") or {})
        affinity = int(cfg.get("timeoutSeconds") or 10800)
    ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    # ipMode Proxy: the load balancer delivers the traffic itself, kube-proxy programs nothing for it
    lb_ips = _ipv4(i.get("ip") for i in ingress if i.get("ip") and i.get("ipMode") != "Proxy")
    out: dict[ServicePortName, ServicePort] = {}
    for p in spec.get("ports") or []:
        proto = (p.get("protocol") or "TCP").upper()
        if proto not in PROTOCOLS:
            continue
        spn = ServicePortName(ns, name, p.get("name") or "", proto)
        node_port = int(p.get("nodePort") or 0) if svc_type in ("NodePort", "LoadBalancer") else 0
        out[spn] = ServicePort(
            name=spn,
            cluster_ip=cluster_ip,
            port=int(p["port"]),
            protocol=proto,
            node_port=node_port,
            external_ips=_ipv4(spec.get("externalIPs") or []),
            load_balancer_ips=lb_ips if svc_type == "LoadBalancer" else (),
            affinity_timeout=affinity,
            external_local=spec.get("externalTrafficPolicy") == "Local",
            internal_local=spec.get("internalTrafficPolicy") == "Local",
            type=svc_type,
            health_check_node_port=int(spec.get("healthCheckNodePort") or 0)
            if svc_type == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local" else 0,
            source_ranges=_source_ranges(spec) if svc_type == "LoadBalancer" else (),
        )
    return out


def service_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def slice_service_key(obj: Mapping[str, Any]) -> str | None:
    """The owning Service of an EndpointSlice (its kubernetes.io/service-name label)."""
    meta = obj.get("metadata") or {}
    svc = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    return f"{meta.get('namespace') or 'default'}/{svc}" if svc else None


def parse_endpoint_slice(obj: Mapping[str, Any]) -> dict[tuple[str, str], tuple[Endpoint, ...]]:
    """An EndpointSlice → {(port name, protocol): endpoints}. IPv4 slices only."""
    if (obj.get("addressType") or "IPv4") != "IPv4":
        return {}
    out: dict[tuple[str, str], tuple[Endpoint, ...]] = {}
    for port in obj.get("ports") or [{}]:
        number = port.get("port")
        if number is None:
            continue
        key = (port.get("name") or "", (port.get("protocol") or "TCP").upper())
        eps = []
        for ep in obj.get("endpoints") or []:
            cond = ep.get("conditions") or {}
            ready = cond.get("ready")
            ready = True if ready is None else bool(ready)  # nil means ready (API semantics)
            serving = cond.get("serving")
            serving = ready if serving is None else bool(serving)
            terminating = bool(cond.get("terminating"))
            for ip in _ipv4(ep.get("addresses") or [])[:1]:  # consumers use the first address
                eps.append(Endpoint(ip, int(number), ready, serving, terminating, ep.get("nodeName")))
        out[key] = tuple(eps)
    return out


def parse_endpoints(obj: Mapping[str, Any] | None) -> dict[tuple[str, str], tuple[Endpoint, ...]]:
    """A v1 Endpoints object → {(port name, protocol): endpoints} (notReadyAddresses as not ready)."""
    out: dict[tuple[str, str], list[Endpoint]] = {}
    for subset in (obj or {}).get("subsets") or []:
        for port in subset.get("ports") or []:
            key = (port.get("name") or "", (port.get("protocol") or "TCP").upper())
            lst = out.setdefault(key, [])
            for field, ready in (("addresses", True), ("notReadyAddresses", False)):
                for a in subset.get(field) or []:
                    if _ipv4([a.get("ip")]):
                        lst.append(Endpoint(a["ip"], int(port["port"]), ready, ready, False,
                                            a.get("nodeName")))
    return {k: tuple(v) for k, v in out.items()}


def merge_endpoints(parts: Iterable[Mapping[tuple[str, str], tuple[Endpoint, ...]]]
                    ) -> dict[tuple[str, str], tuple[Endpoint, ...]]:
    """Merge several slices of one Service: dedupe by ip:port, stable sorted order."""
    merged: dict[tuple[str, str], dict[str, Endpoint]] = {}
    for part in parts:
        for key, eps in part.items():
            bucket = merged.setdefault(key, {})
            for ep in eps:
                old = bucket.get(str(ep))
                if old is None or (ep.ready and not old.ready):
                    bucket[str(ep)] = ep
    return {k: tuple(sorted(v.values())) for k, v in merged.items() if v}


@dataclasses.dataclass(frozen=True)
class EndpointSelection:
    """Which endpoints a Service port uses for which traffic (kube-proxy's CategorizeEndpoints)."""

    cluster: tuple[Endpoint, ...]  # for ClusterIP traffic (Local internal policy: local only)
    local: tuple[Endpoint, ...]  # node-local endpoints, for Local external policy
    all_reachable: tuple[Endpoint, ...]  # union: every endpoint chain the rules reference
    has_any_ready: bool


def _usable(eps: Iterable[Endpoint]) -> tuple[Endpoint, ...]:
    """Ready endpoints; if none, serving-but-terminating ones (graceful termination), else none."""
    eps = tuple(eps)
    ready = tuple(e for e in eps if e.ready)
    if ready:
        return ready
    return tuple(e for e in eps if e.serving and e.terminating)


def categorize(sp: ServicePort, endpoints: Iterable[Endpoint], node_name: str | None) -> EndpointSelection:
    eps = tuple(endpoints)
    local = _usable(e for e in eps if e.is_local(node_name))
    cluster = local if sp.internal_local else _usable(eps)
    ext_local = local if sp.uses_local_external else ()
    reach = tuple(dict.fromkeys(cluster + ext_local))  # ordered union (endpoints arrive sorted)
    return EndpointSelection(cluster, local, reach, any(e.ready for e in eps))

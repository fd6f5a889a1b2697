"""Objects → the indexes DNS answers from: Services, endpoints (EndpointSlices, else Endpoints, plus pods
with hostname + subdomain of a headless Service), pods by IP. Pure; pods are kept incrementally.

Semantics follow Kubernetes and CoreDNS: only ready endpoints (ready unset counts as ready), EndpointSlices
win over v1 Endpoints for a Service, a Service or endpoint without ports gets the port -1 sentinel
(address records, no SRV), hostNetwork and finished pods have no DNS address.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

Obj = Mapping[str, Any]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclasses.dataclass(frozen=True)
class Port:
    name: str
    protocol: str
    port: int  # -1: the "no ports" sentinel (address-only records, no SRV)


@dataclasses.dataclass
class Endpoint:
    ip: str
    hostname: str
    ports: tuple[Port, ...]

    def label(self) -> str:
        """The endpoint's DNS label: its hostname, else its IP with '-' for '.'/':' (as CoreDNS)."""
        return self.hostname or self.ip.replace(".", "-").replace(":", "-")


@dataclasses.dataclass
class Service:
    namespace: str
    name: str
    type: str
    cluster_ips: tuple[str, ...]
    external_name: str
    headless: bool
    ports: tuple[Port, ...]
    publish_not_ready: bool


@dataclasses.dataclass
class Index:
    namespaces: set[str]
    services: dict[tuple[str, str], Service]
    service_by_ip: dict[str, tuple[str, str]]
    raw_endpoints: dict[tuple[str, str], list[Endpoint]]  # from EndpointSlices / Endpoints only
    endpoints: dict[tuple[str, str], list[Endpoint]]  # deduplicated, with pod hostnames merged
    endpoint_names: dict[str, list[str]]  # ip -> "<label>.<svc>.<ns>"
    pods_by_ip: dict[str, list[tuple[str, str, str, str]]]  # ip -> (ns, name, hostname, subdomain)


@dataclasses.dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    ips: tuple[str, ...]
    hostname: str
    subdomain: str
    ready: bool


def pod_view(o: Obj | None) -> PodView | None:
    """What DNS reads of a pod; None when it has no address DNS may answer (hostNetwork, finished)."""
    if o is None:
        return None
    meta, spec, status = o.get("metadata") or {}, o.get("spec") or {}, o.get("status") or {}
    if spec.get("hostNetwork") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    ips = tuple(filter(None, [p.get("ip") for p in status.get("podIPs") or []] or [status.get("podIP")]))
    if not ips:
        return None
    return PodView(meta.get("namespace", "default"), meta.get("name", ""), ips,
                   spec.get("hostname", "") or "",
                spec.get("subdomain", "") or "", _pod_ready(o))


class PodIndex:
    """Pods by IP (PTR, verified pod records) and pods with hostname + subdomain, kept incrementally."""

    def __init__(self) -> None:
        self.by_ip: dict[str, list[tuple[str, str, str, str]]] = {}
        self.hostnamed: dict[tuple[str, str], PodView] = {}

    def add(self, o: Obj | None) -> bool:
        p = pod_view(o)
        if p is None:
            return False
        for ip in p.ips:
            self.by_ip.setdefault(ip, []).append((p.namespace, p.name, p.hostname, p.subdomain))
        if p.hostname and p.subdomain:
            self.hostnamed[(p.namespace, p.name)] = p
            return True
        return False

    def remove(self, o: Obj | None) -> bool:
        p = pod_view(o)
        if p is None:
            return False
        for ip in p.ips:
            rest = [e for e in self.by_ip.get(ip, []) if (e[0], e[1]) != (p.namespace, p.name)]
            if rest:
                self.by_ip[ip] = rest
            else:
                self.by_ip.pop(ip, None)
        return self.hostnamed.pop((p.namespace, p.name), None) is not None


def relevant(kind: str, o: Obj) -> Any:
    """The part of an object DNS answers from (equal before and after: the update is a no-op)."""
    if kind == "pods":
        return pod_view(o)
    if kind == "services":
        return o.get("spec")
    if kind == "endpointslices":
        labels = (o.get("metadata") or {}).get("labels") or {}
        return labels.get(SERVICE_NAME_LABEL), o.get("addressType"), o.get("endpoints"), o.get("ports")
    if kind == "endpoints":
        return o.get("subsets")
    return (o.get("metadata") or {}).get("name")


def build_services(objs: Iterable[Obj]) -> tuple[dict[tuple[str, str], Service], dict[str, tuple[str, str]]]:
    services: dict[tuple[str, str], Service] = {}
    service_by_ip: dict[str, tuple[str, str]] = {}
    for o in objs:
        s = parse_service(o)
        services[(s.namespace, s.name)] = s
        for ip in s.cluster_ips:
            service_by_ip.setdefault(ip, (s.namespace, s.name))
    return services, service_by_ip


def build_endpoints(slices: Iterable[Obj], endpoints: Iterable[Obj]) -> dict[tuple[str, str], list[Endpoint]]:
    out: dict[tuple[str, str], list[Endpoint]] = {}
    for o in slices:
        meta = o.get("metadata") or {}
        svc = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if svc and o.get("addressType", "IPv4") in ("IPv4", "IPv6"):
            out.setdefault((meta.get("namespace", "default"), svc), []).extend(slice_endpoints(o))
    for o in endpoints:
        meta = o.get("metadata") or {}
        key = (meta.get("namespace", "default"), meta.get("name", ""))
        if key not in out:  # EndpointSlices win when a Service has both
            out[key] = endpoints_v1(o)
    return out


def merge_endpoints(raw: dict[tuple[str, str], list[Endpoint]], services: dict[tuple[str, str], Service],
                    hostnamed: Iterable[PodView]
                    ) -> tuple[dict[tuple[str, str], list[Endpoint]], dict[str, list[str]]]:
    """Deduplicated endpoints (copies), plus pods with hostname + subdomain of a headless Service."""
    merged = {key: _dedup(eps) for key, eps in raw.items()}
    for p in hostnamed:
        svc = services.get((p.namespace, p.subdomain))
        if svc is not None and svc.headless and (p.ready or svc.publish_not_ready):
            _add_pod_hostname(merged.setdefault((p.namespace, p.subdomain), []), svc, p.hostname, list(p.ips))
    names: dict[str, list[str]] = {}
    for (ns, svc_name), eps in merged.items():
        for e in eps:
            names.setdefault(e.ip, []).append(f"{e.label()}.{svc_name}.{ns}")
    return merged, names


def parse_service(o: Obj) -> Service:
    meta, spec = o.get("metadata") or {}, o.get("spec") or {}
    ips = [ip for ip in (spec.get("clusterIPs") or [spec.get("clusterIP")]) if ip and ip != "None"]
    ports = tuple(Port(p.get("name", "") or "", (p.get("protocol") or "TCP"), int(p.get("port", 0)))
                  for p in spec.get("ports") or []) or (Port("", "", -1),)
    return Service(meta.get("namespace", "default"), meta.get("name", ""), spec.get("type", "ClusterIP"),
                   tuple(ips), spec.get("externalName", "") or "", spec.get("clusterIP") == "None", ports,
                   bool(spec.get("publishNotReadyAddresses")))


def slice_endpoints(o: Obj) -> list[Endpoint]:
    """Ready endpoints of one EndpointSlice (ready unset counts as ready, as the API says)."""
    ports = tuple(Port(p.get("name", "") or "", p.get("protocol") or "TCP", int(p.get("port", -1)))
                  for p in o.get("ports") or []) or (Port("", "", -1),)
    out = []
    for e in o.get("endpoints") or []:
        if (e.get("conditions") or {}).get("ready") is False:
            continue
        for ip in e.get("addresses") or []:
            out.append(Endpoint(ip, e.get("hostname", "") or "", ports))
    return out


def endpoints_v1(o: Obj) -> list[Endpoint]:
    """Ready addresses of a v1 Endpoints (notReadyAddresses are not answered)."""
    out: list[Endpoint] = []
    for sub in o.get("subsets") or []:
        ports = tuple(Port(p.get("name", "") or "", p.get("protocol") or "TCP", int(p.get("port", -1)))
                      for p in sub.get("ports") or []) or (Port("", "", -1),)
        out.extend(Endpoint(a["ip"], a.get("hostname", "") or "", ports) for a in sub.get("addresses") or [])
    return out


def _add_pod_hostname(eps: list[Endpoint], svc: Service, hostname: str, ips: list[str | None]) -> None:
    """A pod with hostname + subdomain of a headless Service: give its endpoint that hostname (or add it)."""
    for ip in filter(None, ips):
        for ep in eps:
            if ep.ip == ip:
                ep.hostname = ep.hostname or hostname
                break
        else:
            ports = tuple(Port(p.name, p.protocol, p.port) for p in svc.ports)
            eps.append(Endpoint(ip, hostname, ports))


def _dedup(eps: list[Endpoint]) -> list[Endpoint]:
    seen: dict[str, Endpoint] = {}
    for ep in eps:
        if ep.ip in seen:
            old = seen[ep.ip]
            old.hostname = old.hostname or ep.hostname
            old.ports = tuple(dict.fromkeys(old.ports + ep.ports))
        else:
            seen[ep.ip] = Endpoint(ep.ip, ep.hostname, ep.ports)
    return list(seen.values())


def _pod_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])

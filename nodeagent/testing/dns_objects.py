"""In-memory Service / EndpointSlice / Pod objects, shaped as the API returns them (tests, benchmarks)."""

from __future__ import annotations

from typing import Any


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def service(name: str, ns: str = "default", cluster_ip: str | None = "10.96.0.20",
            ports: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "ClusterIP", "ports": ports if ports is not None else
                         [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}], **spec}
    if cluster_ip is not None:
        s["clusterIP"] = cluster_ip
        s["clusterIPs"] = [cluster_ip] if cluster_ip != "None" else ["None"]
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns}, "spec": s}


def endpoint_slice(service_name: str, ns: str = "default", endpoints: list[dict[str, Any]] | None = None,
                   ports: list[dict[str, Any]] | None = None, name: str | None = None,
                   address_type: str = "IPv4") -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": address_type,
            "metadata": {"name": name or f"{service_name}-abcde", "namespace": ns,
                         "labels": {"kubernetes.io/service-name": service_name}},
            "endpoints": endpoints or [],
            "ports": ports if ports is not None else [{"name": "http", "port": 8080, "protocol": "TCP"}]}


def ep(ip: str, ready: bool | None = True, hostname: str | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"addresses": [ip]}
    if ready is not None:
        e["conditions"] = {"ready": ready}
    if hostname:
        e["hostname"] = hostname
    return e


def pod(name: str, ns: str = "default", ip: str | None = "10.244.0.5", hostname: str | None = None,
        subdomain: str | None = None, ready: bool = True, host_network: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if hostname:
        spec["hostname"] = hostname
    if subdomain:
        spec["subdomain"] = subdomain
    if host_network:
        spec["hostNetwork"] = True
    status: dict[str, Any] = {"phase": "Running",
                              "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec,
            "status": status}

"""Ingress, Service and EndpointSlice objects for the ingress unit tests."""

from __future__ import annotations

import base64
from typing import Any

from nodeagent.pki import self_signed


def service(name: str, ports: list[tuple[str, int]], ns: str = "default",
            type_: str = "ClusterIP") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": {"type": type_, "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports]}}


def endpoint_slice(svc: str, ports: list[tuple[str, int]], ready: list[str],
                   not_ready: tuple[str, ...] = (), ns: str = "default") -> dict[str, Any]:
    eps = [{"addresses": [a], "conditions": {"ready": True}} for a in ready]
    eps += [{"addresses": [a], "conditions": {"ready": False}} for a in not_ready]
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": f"{svc}-abc", "namespace": ns,
                         "labels": {"kubernetes.io/service-name": svc}},
            "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports], "endpoints": eps}


def backend(svc: str, port: int | str) -> dict[str, Any]:
    return {"service": {"name": svc, "port": {"number": port} if isinstance(port, int) else {"name": port}}}


def ingress(name: str, rules: list[dict[str, Any]], ns: str = "default",
            created: str = "2026-01-01T00:00:00Z", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
            "spec": {"ingressClassName": "nodeagent", "rules": rules, **spec}}


def rule(host: str, *paths: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    r: dict[str, Any] = {"http": {"paths": [{"path": p, "pathType": t, "backend": b} for p, t, b in paths]}}
    if host:
        r["host"] = host
    return r


def tls_secret(name: str, host: str, ns: str = "default") -> dict[str, Any]:
    crt, key = self_signed(host, (host,))
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": ns},
            "data": {"tls.crt": base64.b64encode(crt).decode(), "tls.key": base64.b64encode(key).decode()}}

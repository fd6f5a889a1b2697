"""Make the DNS server reachable at the `kube-dns` Service ClusterIP (kube-system), as pods expect.

The Service has no selector (the server is not a pod): its EndpointSlice, managed by us, points at
the address the server listens on, so the service proxy DNATs 10.96.0.10:53 to it. Idempotent:
an existing Service is kept (its ClusterIP is immutable; a different one is reported), the slice is
rewritten only when its endpoint or ports changed.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from nodeagent.client.rest import Client, ClientError

log = logging.getLogger("nodeagent.dns.register")
NAMESPACE, NAME = "kube-system", "kube-dns"
MANAGED_BY = "nodeagent-dns"


def default_service_ip(service_range: str = "10.96.0.0/12") -> str:
    """The 10th address of the Service range (10.96.0.10 for the default range), as kubeadm picks."""
    return str(ipaddress.ip_network(service_range, strict=False).network_address + 10)


def dns_service(cluster_ip: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": NAME, "namespace": NAMESPACE,
                         "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS",
                                    "kubernetes.io/cluster-service": "true"}},
            "spec": {"clusterIP": cluster_ip, "type": "ClusterIP",
                     "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                               {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}]}}


def dns_endpoint_slice(ip: str, port: int) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "addressType": "IPv6" if ":" in ip else "IPv4",
            "metadata": {"name": f"{NAME}-{MANAGED_BY}", "namespace": NAMESPACE,
                         "labels": {"kubernetes.io/service-name": NAME,
                                    "endpointslice.kubernetes.io/managed-by": MANAGED_BY}},
            "endpoints": [{"addresses": [ip],
                           "conditions": {"ready": True, "serving": True, "terminating": False}}],
            "ports": [{"name": "dns", "port": port, "protocol": "UDP"},
                      {"name": "dns-tcp", "port": port, "protocol": "TCP"}]}


async def ensure_dns_service(client: Client, cluster_ip: str, endpoint_ip: str, port: int,
                             quiet: bool = False) -> str:
    """Create/repair the kube-dns Service and its slice; returns the Service's ClusterIP."""
    changed = True
    try:
        svc = await client.create("services", dns_service(cluster_ip), NAMESPACE)
    except ClientError as e:
        if not e.already_exists:
            raise
        svc = await client.get("services", NAME, NAMESPACE)
        changed = False
    have = (svc.get("spec") or {}).get("clusterIP", "")
    if have != cluster_ip:
        log.log(logging.DEBUG if quiet else logging.WARNING,
                "dns: %s/%s has ClusterIP %s (wanted %s); keeping it", NAMESPACE, NAME, have, cluster_ip)
    want = dns_endpoint_slice(endpoint_ip, port)
    try:
        await client.create("endpointslices.discovery.k8s.io", want, NAMESPACE)
        changed = True
    except ClientError as e:
        if not e.already_exists:
            raise
        cur = await client.get("endpointslices.discovery.k8s.io", want["metadata"]["name"], NAMESPACE)
        if (cur.get("endpoints"), cur.get("ports")) != (want["endpoints"], want["ports"]):
            cur.update(endpoints=want["endpoints"], ports=want["ports"])
            await client.update("endpointslices.discovery.k8s.io", cur, NAMESPACE)
            changed = True
    if changed:
        log.info("dns: %s/%s %s -> %s:%d", NAMESPACE, NAME, have, endpoint_ip, port)
    return have

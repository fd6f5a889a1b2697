"""The cluster DNS addon's API objects, as kubeadm's addon phase installs CoreDNS's: the `kube-dns` Service in
kube-system, its ServiceAccount `coredns`, and (the server is not a pod, so the Service has no selector) an
EndpointSlice pointing at the address the DNS server answers on, so the service proxy DNATs 10.96.0.10:53
to it. The installer (`up`/`server`'s apiserver bootstrap, or `nodeagent dns --register-service`) writes
them; the DNS server itself only reads, under its own ServiceAccount."""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

NAMESPACE, NAME = "kube-system", "kube-dns"
ACCOUNT = "coredns"  # kubeadm's: bound to the system:coredns ClusterRole
MANAGED_BY = "nodeagent-dns"


@dataclasses.dataclass(frozen=True)
class DNSAddon:
    """Where cluster DNS answers: the kube-dns ClusterIP and the server's address and port behind it."""

    cluster_ip: str
    endpoint_ip: str
    port: int

    def __post_init__(self) -> None:
        for ip in (self.cluster_ip, self.endpoint_ip):
            ipaddress.ip_address(ip)  # ValueError: not an address
        if not 0 < self.port <= 65535:
            raise ValueError(f"dns port {self.port}: not a port")


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


def dns_service_account() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": ACCOUNT, "namespace": NAMESPACE}}


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

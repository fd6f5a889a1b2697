"""The cluster DNS server's configuration, validated when it is built (`nodeagent dns` from its flags,
`nodeagent server` / `up` from theirs and the apiserver's)."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Sequence

from nodeagent.dns.forward import parse_upstream, resolv_conf_nameservers
from nodeagent.dns.server import split_hostport

WILDCARDS = ("0.0.0.0", "", "::")
PODS = ("insecure", "verified", "disabled")


@dataclasses.dataclass(frozen=True)
class DNSConfig:
    kubeconfig: str
    listen: str = "0.0.0.0:53"
    cluster_domain: str = "cluster.local"
    upstreams: Sequence[str] | None = None  # None: the nameservers of resolv_conf
    resolv_conf: str = "/etc/resolv.conf"
    ttl: int = 30
    pods: str = "insecure"
    upstream_timeout: float = 2.0
    register_service: bool = False  # create/repair kube-system/kube-dns pointing at this server
    service_ip: str | None = None  # None: the 10th address of service_cluster_ip_range
    service_cluster_ip_range: str = "10.96.0.0/12"
    # the kube-dns endpoint; None: the listen address (needed when listening on every address)
    advertise_address: str | None = None
    retry_bind: bool = False  # keep retrying an address in use (as a server component) instead of failing

    def __post_init__(self) -> None:
        try:
            host, port = split_hostport(self.listen)
            for u in self.upstreams or ():
                parse_upstream(u)
            ipaddress.ip_network(self.service_cluster_ip_range)
            for ip in (self.service_ip, self.advertise_address):
                if ip is not None:
                    ipaddress.ip_address(ip)
        except ValueError as e:
            raise ValueError(f"dns: {e}") from None
        if not 0 <= port <= 65535:
            raise ValueError(f"dns listen address {self.listen!r}: not a port")
        if self.pods not in PODS:
            raise ValueError(f"dns pods {self.pods!r}: one of {', '.join(PODS)}")
        if self.ttl < 0:
            raise ValueError(f"dns ttl {self.ttl}: must not be negative")
        if self.register_service and self.advertise_address is None and host in WILDCARDS:
            raise ValueError(f"dns: listening on {self.listen}, the kube-dns endpoint needs an "
                             "advertise address")

    def upstream_addrs(self) -> list[tuple[str, int]]:
        if self.upstreams is not None:
            return [parse_upstream(u) for u in self.upstreams]
        return resolv_conf_nameservers(self.resolv_conf)

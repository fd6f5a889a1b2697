"""netproxy's configuration (KubeProxyConfiguration's part that netproxy has), validated when it is built
(`nodeagent up` / `agent` / `proxy` build it from their flags)."""

from __future__ import annotations

import dataclasses
import ipaddress

from nodeagent.client.config import Credentials

MODES = ("iptables", "nftables", "ipvs")


@dataclasses.dataclass(frozen=True)
class ProxyConfig:
    mode: str = "iptables"  # kube-proxy's --proxy-mode
    node_name: str | None = None  # for externalTrafficPolicy: Local endpoints
    node_ips: tuple[str, ...] = ()  # addresses NodePorts answer on (empty: every local address)
    cluster_cidr: str | None = None  # pod CIDR: traffic from outside it to a ClusterIP is masqueraded
    netns: str | None = None  # program this named network namespace instead of the process's
    min_sync_period: float = 1.0  # seconds between syncs at least
    sync_period: float = 30.0  # full resync period, seconds
    rule_counters: bool = False  # iptables mode: a packet counter on every rule
    ipvs_scheduler: str = "rr"  # ipvs mode: kube-proxy's --ipvs-scheduler
    ipvs_strict_arp: bool = False  # ipvs mode: kube-proxy's --ipvs-strict-arp
    cleanup_on_stop: bool = False  # remove the rules on stop (throwaway instances; kube-proxy keeps them)
    credentials: Credentials | None = None  # Services and EndpointSlices from this API (None: a given source)

    def __post_init__(self) -> None:
        from netproxy.ipvs.plan import SCHEDULERS

        if self.mode not in MODES:
            raise ValueError(f"proxy mode {self.mode!r}: one of {', '.join(MODES)}")
        if self.ipvs_scheduler not in SCHEDULERS:
            raise ValueError(f"IPVS scheduler {self.ipvs_scheduler!r}: one of {', '.join(SCHEDULERS)}")
        if self.min_sync_period < 0 or self.sync_period < 0:
            raise ValueError(f"proxy sync periods {self.min_sync_period}/{self.sync_period}: "
                             "must not be negative")
        try:
            for ip in self.node_ips:
                ipaddress.ip_address(ip)
            if self.cluster_cidr:
                ipaddress.ip_network(self.cluster_cidr, strict=False)
        except ValueError as e:
            raise ValueError(f"proxy: {e}") from None

"""The kubelet component's configuration (KubeletConfiguration's part that nodeagent has), validated when
it is built (`nodeagent up` / `agent` build it from their flags and the instance's `Layout`)."""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any

from nodeagent.client.config import Credentials
from nodeagent.client.rest import Client


def parse_cluster_dns(value: Any) -> tuple[str, ...]:
    """`--cluster-dns` as the kubelet takes it: comma-separated IPs (or a list); None/'' for none."""
    if not value:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(str(i).strip() for i in items if str(i).strip())


@dataclasses.dataclass(frozen=True)
class KubeletConfig:
    data_dir: str  # the node's state dir (nodefs stats; `up`'s cluster CA in pki/)
    node_name: str
    runtime_endpoint: str  # the CRI socket (a path or unix:// URL)
    credentials: Credentials
    root_dir: str  # volumes: <root_dir>/pods/<uid>/volumes, serving cert: <root_dir>/pki
    log_dir: str  # container logs: <log_dir>/<ns>_<name>_<uid>/<container>/<n>.log
    manifests_dir: str  # static pods
    cgroup_root: str = ""  # the cgroup kubepods goes under; "": the hierarchy's root
    manifest_url: str = ""  # static pods from a URL (--manifest-url)
    http_check_frequency: float = 20.0
    eviction_hard: str | None = None  # kubelet flag syntax; None: the kubelet's defaults
    housekeeping_interval: float = 10.0
    resync: float = 60.0  # kubelet's --sync-frequency: every pod is re-synced at least this often
    port: int = 10250  # the Node API (HTTPS); 0: any free port
    address: str = "0.0.0.0"
    cluster_dns: tuple[str, ...] = ()  # kubelet's --cluster-dns; empty: ClusterFirst pods get the host's DNS
    cluster_domain: str = "cluster.local"
    resolv_conf: str = "/etc/resolv.conf"
    node_ip: str = ""  # kubelet's --node-ip: the InternalIP it reports; empty: detected
    allowed_unsafe_sysctls: tuple[str, ...] = ()  # --allowed-unsafe-sysctls: names or prefixes ending in *
    local_path_dir: str = ""  # the node's local-path provisioner keeps its volumes here; "": no provisioner

    def __post_init__(self) -> None:
        from nodeagent.kubelet.eviction.thresholds import DEFAULT_HARD, ThresholdError, parse_thresholds

        for name in ("data_dir", "node_name", "runtime_endpoint", "root_dir", "log_dir", "manifests_dir"):
            if not getattr(self, name):
                raise ValueError(f"kubelet: {name} is empty")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"kubelet port {self.port}: not a TCP port (0 picks a free one)")
        for name in ("http_check_frequency", "housekeeping_interval", "resync"):
            if getattr(self, name) <= 0:
                raise ValueError(f"kubelet {name} {getattr(self, name)}: must be positive")
        for ip in (*self.cluster_dns, *([self.node_ip] if self.node_ip else [])):
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise ValueError(f"kubelet: {ip!r} is not an IP address") from None
        from nodeagent.kubelet.admission import check_sysctl_pattern

        for pattern in self.allowed_unsafe_sysctls:
            check_sysctl_pattern(pattern)
        try:
            parse_thresholds(self.eviction_hard if self.eviction_hard is not None else DEFAULT_HARD)
        except ThresholdError as e:
            raise ValueError(f"kubelet eviction thresholds {self.eviction_hard!r}: {e}") from None

    def client(self) -> Client:
        return self.credentials.client()

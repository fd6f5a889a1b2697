"""The kubelet component's configuration (KubeletConfiguration's part that nodeagent has), validated when
it is built (`nodeagent up` / `agent` build it from their flags and the instance's `Layout`)."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from nodeagent.api.quantity import QuantityError, parse_quantity
from nodeagent.client.config import Credentials
from nodeagent.client.rest import Client
from nodeagent.kubelet.eviction.thresholds import DEFAULT_HARD, Threshold, ThresholdError, parse_thresholds

RESERVABLE = ("cpu", "memory", "ephemeral-storage", "pid")  # kubelet's parseResourceList


def parse_reserved(m: Mapping[str, str]) -> dict[str, Fraction]:
    """--system-reserved / --kube-reserved as kubelet's parseResourceList takes them (its messages)."""
    out: dict[str, Fraction] = {}
    for k, v in m.items():
        if k not in RESERVABLE:
            raise ValueError(f"cannot reserve {k!r} resource")
        try:
            q = parse_quantity(v)
        except QuantityError as e:
            raise ValueError(f"failed to parse quantity {v!r} for {k!r} resource: {e}") from None
        if q < 0:
            raise ValueError(f"resource quantity for {k!r} cannot be negative: {v}")
        out[k] = q
    return out


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
    eviction_soft: str = ""  # --eviction-soft, e.g. "memory.available<1Gi"
    eviction_soft_grace_period: str = ""  # --eviction-soft-grace-period, e.g. "memory.available=1m30s"
    eviction_minimum_reclaim: str = ""  # --eviction-minimum-reclaim, e.g. "memory.available=100Mi"
    eviction_max_pod_grace_period: int = 0  # caps a soft eviction's pod grace period; <= 0: the pod's own
    eviction_pressure_transition_period: float = 300.0  # seconds a pressure condition outlasts its signal
    system_reserved: tuple[tuple[str, str], ...] = ()  # --system-reserved: (resource, quantity) pairs
    kube_reserved: tuple[tuple[str, str], ...] = ()  # --kube-reserved
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
    volume_plugin_dir: str = ""  # --volume-plugin-dir: FlexVolume drivers; "": flexVolume volumes refused

    def __post_init__(self) -> None:
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
            self.thresholds()
        except ThresholdError as e:
            raise ValueError(f"kubelet eviction thresholds: {e}") from None
        if self.eviction_pressure_transition_period < 0:
            raise ValueError("kubelet eviction-pressure-transition-period "
                             f"{self.eviction_pressure_transition_period}: must not be negative")
        for name in ("system_reserved", "kube_reserved"):
            parse_reserved(dict(getattr(self, name)))

    def thresholds(self) -> list[Threshold]:
        """The hard and soft eviction thresholds, as kubelet's ParseThresholdConfig builds them."""
        return parse_thresholds(self.eviction_hard if self.eviction_hard is not None else DEFAULT_HARD,
                                self.eviction_soft, self.eviction_soft_grace_period,
                                self.eviction_minimum_reclaim)

    def reserved(self) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
        """(system-reserved, kube-reserved) as resource lists."""
        return parse_reserved(dict(self.system_reserved)), parse_reserved(dict(self.kube_reserved))

    def client(self) -> Client:
        return self.credentials.client()

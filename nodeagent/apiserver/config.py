"""The apiserver's configuration (kube-apiserver's flags that `nodeagent server` / `up` take)."""

from __future__ import annotations

import dataclasses
import ipaddress

from nodeagent.api.kube_dns import DNSAddon
from nodeagent.api.sa_names import DEFAULT_ISSUER
from nodeagent.apiserver.kubeconfig import UserKubeconfig


@dataclasses.dataclass(frozen=True)
class ComponentCredential:
    """A kubeconfig the apiserver writes for an embedded component: its own user (and groups), as the
    kube-* components' kubeconfigs name system:kube-scheduler and the like, authorized by RBAC."""
    path: str
    user: str
    groups: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ApiServerConfig:
    data_dir: str  # its state: pki/, tokens.csv, store.db, admin.kubeconfig, join-command
    bind_address: str = "0.0.0.0"
    port: int = 6443  # 0: any free port
    datastore: str = "sqlite"
    service_cluster_ip_range: str = "10.96.0.0/12"
    advertise_address: str | None = None
    repair_interval: float = 10.0
    lease_duration: int = 15
    token_ttl: float = 24 * 3600.0  # the printed join token's lifetime (0: never expires)
    admin_kubeconfig_copy: str | None = None  # the admin kubeconfig is also written here (best effort)
    user_kubeconfig: UserKubeconfig | None = None  # and merged into this person's kubeconfig
    metric_resolution: float = 15.0  # seconds between scrapes of the kubelets' resource metrics
    service_account_issuer: str = DEFAULT_ISSUER  # the `iss` of ServiceAccount tokens
    api_audiences: tuple[str, ...] = ()  # audiences a token must name to authenticate (default: the issuer)
    components: tuple[ComponentCredential, ...] = ()  # kubeconfigs written for embedded components
    # the root-only Unix socket those kubeconfigs name (the same handler chain, without TLS); None: none
    local_socket: str | None = None
    max_requests_inflight: int = 400  # read-only requests served at once (0: no limit), as kube-apiserver's
    max_mutating_requests_inflight: int = 200  # mutating requests served at once (0: no limit)
    dns_addon: DNSAddon | None = None  # the kube-dns Service and slice the bootstrap writes (kubeadm's addon)

    def __post_init__(self) -> None:
        if not self.data_dir:
            raise ValueError("apiserver: a data dir is needed")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"apiserver port {self.port}: not a TCP port (0 picks a free one)")
        if not self.datastore:
            raise ValueError("apiserver datastore: sqlite, memory or etcd://HOST:PORT")
        try:
            ipaddress.ip_network(self.service_cluster_ip_range)
        except ValueError as e:
            raise ValueError(f"service cluster IP range {self.service_cluster_ip_range!r}: {e}") from None
        if self.lease_duration <= 0:
            raise ValueError(f"apiserver lease duration {self.lease_duration}: must be positive")
        if self.metric_resolution <= 0:
            raise ValueError(f"metric resolution {self.metric_resolution}: must be positive seconds")
        if not self.service_account_issuer or (":" in self.service_account_issuer
                                               and not self.service_account_issuer.startswith("https://")):
            raise ValueError(f"service account issuer {self.service_account_issuer!r}: a URL must be "
                             "https:// (or give a name without a scheme)")
        if self.max_requests_inflight < 0 or self.max_mutating_requests_inflight < 0:
            raise ValueError(f"--max-requests-inflight {self.max_requests_inflight}, "
                             f"--max-mutating-requests-inflight {self.max_mutating_requests_inflight}: "
                             "each must be 0 (no limit) or more")
        if self.token_ttl < 0:
            raise ValueError(f"join token TTL {self.token_ttl}: must not be negative")

"""Controller-manager settings: periods, rates and ranges, with the clock tests replace.

One dataclass handed to every controller, so `nodeagent server` flags and tests
configure them in one place (kube-controller-manager's flags, same defaults).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from nodeagent.clock import REAL_CLOCK, Clock
from nodeagent.controllers import nodelifecycle


@dataclasses.dataclass(frozen=True)
class ControllerOptions:
    # node lifecycle
    node_monitor_period: float = 5.0  # --node-monitor-period
    node_monitor_grace_period: float = 40.0  # --node-monitor-grace-period
    node_eviction_rate: float = 0.1  # --node-eviction-rate
    secondary_node_eviction_rate: float = 0.01  # --secondary-node-eviction-rate
    unhealthy_zone_threshold: float = 0.55  # --unhealthy-zone-threshold
    large_cluster_size_threshold: int = 50  # --large-cluster-size-threshold
    # node IPAM
    allocate_node_cidrs: bool = True
    cluster_cidr: str = "10.244.0.0/16"  # --cluster-cidr
    node_cidr_mask_size: int = 24  # --node-cidr-mask-size
    # pod GC
    pod_gc_period: float = 20.0
    # how long a pod's node must stay missing before its pods count as orphans (podgc's quarantineTime)
    pod_gc_orphan_quarantine: float = 40.0
    terminated_pod_gc_threshold: int = 12500  # --terminated-pod-gc-threshold
    # jobs
    job_backoff_base: float = 10.0  # the job controller's DefaultJobBackOff
    job_backoff_max: float = 360.0  # MaxJobBackOff
    cronjob_resync: float = 10.0  # how often every CronJob is looked at even without changes
    # certificates: the CA csrsigning signs with (the manager's serve() takes the server's own by default)
    cluster_signing_cert_file: str | None = None  # --cluster-signing-cert-file
    cluster_signing_key_file: str | None = None  # --cluster-signing-key-file
    # horizontal pod autoscaling (kube-controller-manager's --horizontal-pod-autoscaler-* flags)
    hpa_sync_period: float = 15.0  # --horizontal-pod-autoscaler-sync-period
    hpa_downscale_stabilization: float = 300.0  # --horizontal-pod-autoscaler-downscale-stabilization
    hpa_tolerance: float = 0.1  # --horizontal-pod-autoscaler-tolerance
    hpa_cpu_initialization_period: float = 300.0  # --horizontal-pod-autoscaler-cpu-initialization-period
    hpa_initial_readiness_delay: float = 30.0  # --horizontal-pod-autoscaler-initial-readiness-delay
    # ServiceAccount tokens: the key legacy token Secrets are signed with and the CA they carry (serve()
    # takes the server's pki/sa.key and ca.crt by default; kube-root-ca.crt is the apiserver's Bootstrap's)
    service_account_private_key_file: str | None = None  # --service-account-private-key-file
    root_ca_file: str | None = None  # --root-ca-file
    # LoadBalancer Services: the addresses the service controller allocates from ("" = none: they stay
    # pending, as kube-controller-manager without a cloud provider); CIDR[,CIDR] or FIRST-LAST
    service_lb_pool: str = ""  # --service-lb-pool
    # the clock: monotonic() for periods and rate limits, now() for API timestamps and schedules
    clock: Clock = REAL_CLOCK

    def __post_init__(self) -> None:
        from nodeagent.api.service_lb import parse_pool

        parse_pool(self.service_lb_pool)  # ValueError naming the bad range

    def lifecycle_settings(self) -> nodelifecycle.Settings:
        return nodelifecycle.Settings(
            grace_period=self.node_monitor_grace_period, eviction_rate=self.node_eviction_rate,
            secondary_eviction_rate=self.secondary_node_eviction_rate,
            unhealthy_zone_threshold=self.unhealthy_zone_threshold,
            large_cluster_size=self.large_cluster_size_threshold)


def iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

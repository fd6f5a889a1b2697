"""The L2 speaker's configuration (what `up` / `agent` hand it)."""

from __future__ import annotations

import dataclasses

from nodeagent.client.config import Credentials


@dataclasses.dataclass(frozen=True)
class SpeakerConfig:
    credentials: Credentials
    node_name: str
    node_ip: str | None = None  # the interface holding it answers ARP (None: the default route's)
    interface: str | None = None  # answer ARP on this interface instead
    metrics_port: int = 0  # Prometheus /metrics (0: off)
    lease_namespace: str = "kube-system"
    lease_duration: float = 5.0  # seconds an owner's Lease lasts without renewal: the failover time
    retry_period: float = 1.0  # how often owners renew and candidates try

    def __post_init__(self) -> None:
        if not self.node_name:
            raise ValueError("lb speaker: a node name is needed")
        if not 0 < self.retry_period < self.lease_duration:
            raise ValueError(f"lb speaker: retry period {self.retry_period}s must be positive and shorter "
                             f"than the lease ({self.lease_duration}s)")

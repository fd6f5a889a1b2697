"""The ingress component's configuration, built by the composition layer from its flags and the Layout."""

from __future__ import annotations

import dataclasses

from nodeagent.client.config import Credentials
from nodeagent.ingress.model import CLASS_NAME


@dataclasses.dataclass(frozen=True)
class IngressConfig:
    credentials: Credentials
    work_dir: str  # haproxy.cfg, certificates, the admin socket
    listen_address: str = "0.0.0.0"
    http_port: int = 80
    https_port: int = 443
    metrics_port: int = 0  # HAProxy's Prometheus exporter (/metrics); 0: off
    haproxy: str = "haproxy"
    run_proxy: bool = True  # serve traffic on this node
    manage: bool = False  # the control-plane duties: the IngressClass, statuses, events (one writer)
    class_name: str = CLASS_NAME
    node_name: str = ""

    def __post_init__(self) -> None:
        for what, port in (("http", self.http_port), ("https", self.https_port)):
            if not 0 < port <= 65535:
                raise ValueError(f"--ingress-{what}-port {port}: not a port")
        if not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"--ingress-metrics-port {self.metrics_port}: not a port")
        if self.run_proxy and self.http_port == self.https_port:
            raise ValueError(f"--ingress-http-port and --ingress-https-port are both {self.http_port}")
        if not self.run_proxy and not self.manage:
            raise ValueError("ingress: neither serving traffic nor managing objects")

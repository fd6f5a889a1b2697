"""Which API credential a node component uses, decided once where its config is built.

Control-plane parts (scheduler, controllers, DNS, the pod-network controller) run beside the apiserver and
take the admin kubeconfig it writes (`Layout.admin_kubeconfig`) as a plain path. Node parts (kubelet,
netproxy, netpol, nodenet) take `Credentials`: the node's own kubeconfig when the node joined (`agent`),
the same admin kubeconfig under `up` (where the node and the server are one process), or a server URL
with a bearer token (`agent --discovery-token-unsafe-skip-ca-verification`).
"""

from __future__ import annotations

import dataclasses

from nodeagent.client.ratelimit import TokenBucket
from nodeagent.client.rest import Client


@dataclasses.dataclass(frozen=True)
class Credentials:
    kubeconfig: str = ""  # a kubeconfig file; else server (+ token)
    server: str = ""
    token: str = ""

    def __post_init__(self) -> None:
        if not self.kubeconfig and not self.server:
            raise ValueError("API credentials: a kubeconfig or a server URL is needed")
        if self.kubeconfig and (self.server or self.token):
            raise ValueError("API credentials: a kubeconfig or a server URL and token, not both")

    def client(self, limiter: TokenBucket | None = None) -> Client:
        """A new client, its requests rate-limited by `limiter` when given (OSError/ValueError/KeyError
        while `up`'s apiserver has not written the kubeconfig)."""
        if self.kubeconfig:
            return Client.from_kubeconfig(self.kubeconfig, limiter=limiter)
        return Client(self.server, self.token or None, insecure=True, limiter=limiter)

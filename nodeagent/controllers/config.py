"""The controller manager component's configuration (what `nodeagent server` / `up` hand it)."""

from __future__ import annotations

import dataclasses

from nodeagent.controllers.options import ControllerOptions


@dataclasses.dataclass(frozen=True)
class ControllerManagerConfig:
    kubeconfig: str  # its kubeconfig (the apiserver writes one for system:kube-controller-manager)
    controllers: str = "*"  # kube-controller-manager's --controllers: `*`, `name`, `-name`, `none`
    options: ControllerOptions = dataclasses.field(default_factory=ControllerOptions)
    # kube-controller-manager's --use-service-account-credentials (kubeadm sets it): each controller
    # writes as kube-system/<its account>, authorized by its system:controller:<account> role
    use_service_account_credentials: bool = True

    def __post_init__(self) -> None:
        from nodeagent.controllers.manager import select

        if not self.kubeconfig:
            raise ValueError("controllers: a kubeconfig is needed")
        select(self.controllers)  # ValueError naming an unknown controller

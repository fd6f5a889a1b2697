"""The controller manager component's configuration (what `nodeagent server` / `up` hand it)."""

from __future__ import annotations

import dataclasses

from nodeagent.controllers.options import ControllerOptions


@dataclasses.dataclass(frozen=True)
class ControllerManagerConfig:
    kubeconfig: str  # the admin kubeconfig the apiserver writes
    controllers: str = "*"  # kube-controller-manager's --controllers: `*`, `name`, `-name`, `none`
    options: ControllerOptions = dataclasses.field(default_factory=ControllerOptions)

    def __post_init__(self) -> None:
        from nodeagent.controllers.manager import select

        if not self.kubeconfig:
            raise ValueError("controllers: a kubeconfig is needed")
        select(self.controllers)  # ValueError naming an unknown controller

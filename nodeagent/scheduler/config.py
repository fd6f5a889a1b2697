"""The scheduler component's configuration (what `nodeagent server` / `up` hand it).

Named `SchedulerServiceConfig` because `profile.SchedulerConfig` is the KubeSchedulerConfiguration-like
profile set it loads from `profile` (a YAML file; None: the default profile).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class SchedulerServiceConfig:
    kubeconfig: str  # the admin kubeconfig the apiserver writes
    profile: str | None = None  # a KubeSchedulerConfiguration-like file; None: the defaults

    def __post_init__(self) -> None:
        if not self.kubeconfig:
            raise ValueError("scheduler: a kubeconfig is needed")

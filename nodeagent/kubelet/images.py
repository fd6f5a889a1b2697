"""Image pull decisions and the events around them (kubelet pkg/kubelet/images/image_manager.go).

The pod worker asks `pull_decision(container, present)`; on a pull it records the Pulling/Pulled events
with these messages, on a failure ErrImagePull, and consults `backoff.ImagePullBackoff` before retrying.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nodeagent.kubelet.status import ERR_IMAGE_NEVER_PULL, ERR_IMAGE_PULL, INVALID_IMAGE_NAME


def default_pull_policy(image: str) -> str:
    """The apiserver's default: Always for `:latest` or an untagged image, else IfNotPresent (digests too)."""
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    if ":" not in last or last.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


@dataclasses.dataclass(frozen=True)
class PullDecision:
    pull: bool
    error_reason: str = ""  # ErrImageNeverPull / InvalidImageName when the container cannot start
    message: str = ""  # the event message (Normal "Pulled" when present, Warning otherwise)


def pull_decision(container: Mapping[str, Any], present: bool) -> PullDecision:
    """shouldPullImage, plus the messages kubelet records when it does not pull."""
    image = container.get("image") or ""
    if not image or image != image.strip() or any(c.isspace() for c in image):
        return PullDecision(False, INVALID_IMAGE_NAME, f'Failed to apply default image tag "{image}": '
                                                       f'couldn\'t parse image name "{image}": invalid '
                                                       'reference format')
    policy = container.get("imagePullPolicy") or default_pull_policy(image)
    if policy == "Never":
        if present:
            return PullDecision(False, "", f'Container image "{image}" already present on machine')
        return PullDecision(False, ERR_IMAGE_NEVER_PULL,
                            f'Container image "{image}" is not present with pull policy of Never')
    if policy == "Always" or not present:
        return PullDecision(True)
    return PullDecision(False, "", f'Container image "{image}" already present on machine')


def pulling_message(image: str) -> str:
    return f'Pulling image "{image}"'


def _go_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    m, s = divmod(seconds, 60)
    return f"{int(m)}m{s:.3f}".rstrip("0").rstrip(".") + "s"


def pulled_message(image: str, pull_seconds: float, total_seconds: float, size_bytes: int) -> str:
    return (f'Successfully pulled image "{image}" in {_go_duration(pull_seconds)} '
            f"({_go_duration(total_seconds)} including waiting). Image size: {size_bytes} bytes.")


def pull_failed(image: str, err: str) -> tuple[str, str]:
    """(reason, message) of the Failed event and the container's Waiting state after a failed pull."""
    return ERR_IMAGE_PULL, f'Failed to pull image "{image}": {err}'

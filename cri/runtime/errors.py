"""The runtime's domain errors; the CRI server maps them to gRPC codes in one place."""

from __future__ import annotations


class RuntimeError_(Exception):
    """Base of every error the runtime reports to its callers."""


class NotFound(RuntimeError_):
    pass


class AlreadyExists(RuntimeError_):
    pass


class InvalidArgument(RuntimeError_):
    pass


class FailedPrecondition(RuntimeError_):
    pass


class Unimplemented(RuntimeError_):
    pass


class NetworkSetupFailed(RuntimeError_):
    """A pod sandbox's network could not be set up (no CNI config loaded, or the ADD failed): containerd
    answers Unknown with `failed to setup network for sandbox "<id>": <cause>`."""

    def __init__(self, sid: str, cause: str) -> None:
        super().__init__(f'failed to setup network for sandbox "{sid}": {cause}')

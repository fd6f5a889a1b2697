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

"""The driver's one error type: a CSI spec error code (a gRPC status code's name) and a message.

The core raises it; only `csi.driver.server` turns it into a gRPC status."""

from __future__ import annotations


class CSIError(Exception):
    """code: INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, OUT_OF_RANGE, FAILED_PRECONDITION, ABORTED,
    RESOURCE_EXHAUSTED, INTERNAL (the spec's "Error Scheme" per RPC)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> CSIError:
    return CSIError("INVALID_ARGUMENT", message)


def not_found(message: str) -> CSIError:
    return CSIError("NOT_FOUND", message)


def require(value: object, what: str) -> None:
    """INVALID_ARGUMENT when a required field is empty (the spec's "MUST be specified" fields)."""
    if not value:
        raise invalid(f"{what} missing in request")

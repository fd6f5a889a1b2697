"""The one place domain errors become gRPC status codes, and every RPC is logged."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from cri.runtime import errors
from cri.runtime.core import StartError

log = logging.getLogger("nodeagent.cri.rpc")

CODES: list[tuple[type[BaseException], grpc.StatusCode]] = [
    (errors.NotFound, grpc.StatusCode.NOT_FOUND),
    (errors.AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (errors.InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.Unimplemented, grpc.StatusCode.UNIMPLEMENTED),
    (TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (StartError, grpc.StatusCode.UNKNOWN),
    (errors.NetworkSetupFailed, grpc.StatusCode.UNKNOWN),
]


def _extra_codes() -> list[tuple[type[BaseException], grpc.StatusCode]]:
    """Image-store errors, when that package is present."""
    try:
        from cri.images import errors as ie
    except ImportError:
        return []
    out = []
    for name, code in (("ImageNotFound", grpc.StatusCode.NOT_FOUND),
                       ("InvalidReference", grpc.StatusCode.INVALID_ARGUMENT),
                       ("PullError", grpc.StatusCode.UNKNOWN)):
        cls = getattr(ie, name, None)
        if cls is not None:
            out.append((cls, code))
    return out


_CODES: list[tuple[type[BaseException], grpc.StatusCode]] | None = None


def code_for(exc: BaseException) -> grpc.StatusCode:
    global _CODES
    if _CODES is None:
        _CODES = _extra_codes() + CODES
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


def rpc(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a unary servicer method: log it, map domain errors to status codes."""

    @functools.wraps(fn)
    async def wrapper(self, request, context):
        t0 = time.monotonic()
        try:
            resp = await fn(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as e:
            code = code_for(e)
            internal = code == grpc.StatusCode.INTERNAL
            level = logging.ERROR if internal else logging.INFO
            log.log(level, "%s failed (%s): %s", fn.__name__, code.name, e, exc_info=internal)
            await context.abort(code, str(e) or type(e).__name__)
        log.debug("%s ok in %.1f ms", fn.__name__, (time.monotonic() - t0) * 1000)
        return resp

    return wrapper

"""The runtime's second entry, for a kubelet in its own process (`cri.client.in_process` finds it under
the socket path): a unary call goes to the same servicer method gRPC would call, through the same `@rpc`
boundary, with what gRPC gives it and its caller and nothing shared between them:

- the servicer gets its own copy of the request (the kubelet may reuse or change what it sent); its answer
  is built per call (protobuf copies whatever message is assigned into it), so it is handed over as is;
- a request or answer above the gRPC server's message limits is refused with RESOURCE_EXHAUSTED and grpc's
  words, as the socket refuses it (the limits are the server's options, handed in by `cri.server.app`);
- the call runs in the caller's task with the caller's deadline: past it, or when the caller is cancelled,
  the handler is cancelled, as grpc.aio's server cancels a handler whose client's deadline passed;
- an abort, a `set_code`, or an unexpected exception ends as gRPC ends it: a `StatusError` with the code
  and details the client would read (UNKNOWN "Unexpected ..." for an exception with no code set)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import grpc

from cri.client.in_process import StatusError

log = logging.getLogger("nodeagent.cri.rpc")


class LocalContext:
    """The servicer context's parts a unary handler uses (grpc.aio.ServicerContext's names)."""

    def __init__(self, deadline: float | None) -> None:
        self._deadline = deadline
        self._code = grpc.StatusCode.OK
        self._details = ""

    async def abort(self, code: grpc.StatusCode, details: str = "",
                    trailing_metadata: Sequence[tuple[str, str]] = ()) -> NoReturn:
        if code == grpc.StatusCode.OK:  # as grpc: an abort with OK is a bug, reported as UNKNOWN
            code = grpc.StatusCode.UNKNOWN
        self._code, self._details = code, details
        raise grpc.aio.AbortError()

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - asyncio.get_running_loop().time())

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    def peer(self) -> str:
        return "in-process"

    def cancelled(self) -> bool:
        return False

    def set_trailing_metadata(self, trailing_metadata: Sequence[tuple[str, str]]) -> None:
        pass

    def error(self) -> StatusError:
        return StatusError(self._code, self._details)


def _deadline_exceeded() -> StatusError:
    return StatusError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")


class LocalEntry:
    """The servicers by full service name (`runtime.v1.RuntimeService`...), called as `Server.call`."""

    def __init__(self, services: Mapping[str, Any], max_receive: int, max_send: int) -> None:
        self._services = dict(services)
        self._max_receive, self._max_send = max_receive, max_send
        self._stopped = False

    def stop(self) -> None:
        """Refuse new calls, as the stopped server's socket does (the kubelet retries, as over gRPC)."""
        self._stopped = True

    async def call(self, service: str, method: str, request: Any, deadline: float | None) -> Any:
        if self._stopped:
            raise StatusError(grpc.StatusCode.UNAVAILABLE, "the runtime has stopped")
        servicer = self._services.get(service)
        if servicer is None:
            raise StatusError(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        handler = getattr(servicer, method)
        size = request.ByteSize()
        if size > self._max_receive:  # grpc core's words for the server's receive limit
            raise StatusError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"SERVER: Received message larger than max ({size} vs. {self._max_receive})")
        own = type(request)()  # the servicer's own copy, as the wire makes one (CopyFrom: half the cost
        own.CopyFrom(request)  # of a SerializeToString/FromString round trip, bench/README seventh pass)
        loop = asyncio.get_running_loop()
        context = LocalContext(None if deadline is None else loop.time() + deadline)
        scope = asyncio.timeout(deadline)
        try:
            async with scope:
                response = await handler(own, context)
        except grpc.aio.AbortError:
            raise context.error() from None
        except Exception as e:
            if scope.expired():
                raise _deadline_exceeded() from None
            log.exception("Unexpected [%s] raised by servicer method [%s/%s]", type(e).__name__, service,
                          method)
            code = context.code() if context.code() != grpc.StatusCode.OK else grpc.StatusCode.UNKNOWN
            raise StatusError(code, f"Unexpected {type(e)}: {e}") from None
        if scope.expired():  # the handler swallowed its cancellation: the client had given up anyway
            raise _deadline_exceeded()
        if context.code() != grpc.StatusCode.OK:  # set_code without raising: the answer is dropped
            raise context.error()
        size = response.ByteSize()
        if size > self._max_send:  # and for its send limit
            raise StatusError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"SERVER: Sent message larger than max ({size} vs. {self._max_send})")
        return response

"""`CRIClient`: the CRI client's verbs as blocking calls (tests, benchmarks, tools).

Every verb is written once, as a coroutine of `cri.client.aio.RuntimeClient`. A verb awaits nothing but
its stub's call (and `_sleep` between polls), so here it runs over grpc's generated *sync* stubs,
wrapped so that a call is made at once and returns an already-resolved awaitable: the coroutine then
runs to its end in a single step, with no event loop and no thread. A caller's own event loop, if it
has one, is neither borrowed nor nested (a call blocks its thread, as any blocking call does). Errors
and streams are sync grpc's: a grpc.RpcError with code() and details(); GetContainerEvents a blocking
iterator with cancel().
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar

import grpc

from cri.client.aio import CHANNEL_OPTIONS, RuntimeClient, endpoint_target
from cri.proto import api_pb2_grpc

T = TypeVar("T")


class _Resolved:
    """An awaitable that already holds its value: awaiting it never suspends."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, Any]:
        return self.value
        yield  # (a generator that returns at once)


class _ResolvedStub:
    """A sync stub whose unary calls return _Resolved; its server streams are returned as they are."""

    def __init__(self, stub: Any) -> None:
        self._stub = stub

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)
        if isinstance(method, grpc.UnaryStreamMultiCallable):
            return method

        def call(request: Any, timeout: float | None = None) -> _Resolved:
            return _Resolved(method(request, timeout=timeout))

        return call


def _resolved_sleep(seconds: float) -> _Resolved:
    return _Resolved(time.sleep(seconds))


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a verb that never suspends to its end."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a CRI verb waited on something other than its call")


class CRIClient:
    """Every coroutine method of RuntimeClient, with the same name and arguments, as a blocking call."""

    def __init__(self, endpoint: str, timeout: float = 120.0) -> None:
        self.channel = grpc.insecure_channel(endpoint_target(endpoint), options=CHANNEL_OPTIONS)
        self._core = RuntimeClient.over(_ResolvedStub(api_pb2_grpc.RuntimeServiceStub(self.channel)),
                                        _ResolvedStub(api_pb2_grpc.ImageServiceStub(self.channel)),
                                        timeout, _resolved_sleep)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        verb = getattr(RuntimeClient, name, None)
        if name.startswith("_") or not inspect.iscoroutinefunction(verb) or name == "close":
            raise AttributeError(f"{type(self).__name__!r} has no verb {name!r}")
        bound = getattr(self._core, name)

        @functools.wraps(verb)
        def call(*args: Any, **kwargs: Any) -> Any:
            return _run(bound(*args, **kwargs))

        setattr(self, name, call)  # looked up once per client
        return call

    @property
    def timeout(self) -> float:
        return self._core.timeout

    def get_container_events(self) -> Any:
        """The runtime's GetContainerEvents stream: a blocking iterator with cancel()."""
        return self._core.get_container_events()

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> CRIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

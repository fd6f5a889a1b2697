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
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from cri.client.aio import CHANNEL_OPTIONS, RuntimeClient, endpoint_target
from cri.proto import api_pb2_grpc

if TYPE_CHECKING:
    from cri.client.aio import PULL_TIMEOUT, Labels
    from cri.proto import api_pb2 as pb

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
    time.sleep(seconds)
    return _Resolved(None)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a verb that never suspends to its end."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a CRI verb waited on something other than its call")


def _verb(client: CRIClient, name: str) -> Callable[..., Any]:
    """RuntimeClient's coroutine `name` as a blocking method of `client` (CRIClient's __getattr__)."""
    verb = getattr(RuntimeClient, name, None)
    if name.startswith("_") or not inspect.iscoroutinefunction(verb) or name == "close":
        raise AttributeError(f"{type(client).__name__!r} has no verb {name!r}")
    bound = getattr(client._core, name)

    @functools.wraps(verb)
    def call(*args: Any, **kwargs: Any) -> Any:
        return _run(bound(*args, **kwargs))

    setattr(client, name, call)  # looked up once per client
    return call


class CRIClient:
    """Every coroutine method of RuntimeClient, with the same name and arguments, as a blocking call."""

    def __init__(self, endpoint: str, timeout: float = 120.0) -> None:
        self.channel = grpc.insecure_channel(endpoint_target(endpoint), options=CHANNEL_OPTIONS)
        self._core = RuntimeClient.over(_ResolvedStub(api_pb2_grpc.RuntimeServiceStub(self.channel)),
                                        _ResolvedStub(api_pb2_grpc.ImageServiceStub(self.channel)),
                                        timeout, _resolved_sleep)

    if TYPE_CHECKING:
        # What __getattr__ makes of RuntimeClient's verbs, spelled out for type checkers (the same
        # parameters, the result without the await): tests/unit/cri/test_client_verbs.py holds them equal.
        def version(self, api_version: str = "v1") -> pb.VersionResponse: ...
        def wait_ready(self, deadline_s: float = 30.0) -> pb.VersionResponse: ...
        def status(self, verbose: bool = False) -> pb.StatusResponse: ...
        def runtime_config(self) -> pb.RuntimeConfigResponse: ...
        def update_runtime_config(self, pod_cidr: str) -> None: ...

        def run_pod_sandbox(self, config: pb.PodSandboxConfig, runtime_handler: str = "") -> str: ...
        def stop_pod_sandbox(self, sid: str) -> None: ...
        def remove_pod_sandbox(self, sid: str) -> None: ...
        def pod_sandbox_status(self, sid: str, verbose: bool = False) -> pb.PodSandboxStatusResponse: ...
        def list_pod_sandbox(self, *, id: str = "", state: pb.PodSandboxState | None = None,
                             label_selector: Labels = None) -> list[pb.PodSandbox]: ...

        def create_container(self, sid: str, config: pb.ContainerConfig,
                             sandbox_config: pb.PodSandboxConfig) -> str: ...
        def start_container(self, cid: str) -> None: ...
        def stop_container(self, cid: str, grace: int = 0) -> None: ...
        def remove_container(self, cid: str) -> None: ...
        def list_containers(self, *, id: str = "", pod_sandbox_id: str = "",
                            state: pb.ContainerState | None = None,
                            label_selector: Labels = None) -> list[pb.Container]: ...
        def container_status(self, cid: str, verbose: bool = False) -> pb.ContainerStatusResponse: ...
        def wait_container_state(self, cid: str, state: pb.ContainerState,
                                 deadline_s: float = 30.0) -> pb.ContainerStatus: ...
        def update_container_resources(self, cid: str, linux: pb.LinuxContainerResources) -> None: ...
        def reopen_container_log(self, cid: str) -> None: ...
        def checkpoint_container(self, cid: str, location: str = "", timeout_s: int = 0) -> None: ...

        def exec_sync(self, cid: str, cmd: list[str], timeout_s: int = 0) -> pb.ExecSyncResponse: ...
        def exec(self, cid: str, cmd: list[str], *, tty: bool = False, stdin: bool = False,
                 stdout: bool = False, stderr: bool = False) -> str: ...
        def attach(self, cid: str, *, tty: bool = False, stdin: bool = False, stdout: bool = False,
                   stderr: bool = False) -> str: ...
        def port_forward(self, sid: str, ports: list[int] | None = None) -> str: ...

        def container_stats(self, cid: str) -> pb.ContainerStats: ...
        def list_container_stats(self, *, id: str = "", pod_sandbox_id: str = "",
                                 label_selector: Labels = None) -> list[pb.ContainerStats]: ...
        def pod_sandbox_stats(self, sid: str) -> pb.PodSandboxStats: ...
        def list_pod_sandbox_stats(self, *, id: str = "",
                                   label_selector: Labels = None) -> list[pb.PodSandboxStats]: ...
        def list_metric_descriptors(self) -> list[pb.MetricDescriptor]: ...
        def list_pod_sandbox_metrics(self) -> list[pb.PodSandboxMetrics]: ...

        def list_images(self, image: str = "") -> list[pb.Image]: ...
        def image_status(self, image: str, verbose: bool = False) -> pb.ImageStatusResponse: ...
        def pull_image(self, image: str, *, auth: pb.AuthConfig | None = None,
                       sandbox_config: pb.PodSandboxConfig | None = None,
                       deadline: float = PULL_TIMEOUT) -> str: ...
        def remove_image(self, image: str) -> None: ...
        def image_fs_info(self) -> pb.ImageFsInfoResponse: ...
    else:
        __getattr__ = _verb

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

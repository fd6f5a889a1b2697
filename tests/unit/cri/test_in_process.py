"""The kubelet's CRI calls in the runtime's own process (cri.client.in_process, cri.server.in_process):
every outcome as over gRPC (the same cases run both ways), the request never shared with the servicer,
and `up`'s wiring (its kubelet finds its runtime; the socket still serves everyone else)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from cri.client import RuntimeClient, in_process, is_not_found, is_unimplemented
from cri.proto import api_pb2 as pb
from cri.proto import api_pb2_grpc
from cri.runtime import errors
from cri.server.app import start_server, stop_local
from cri.server.boundary import rpc
from cri.server.in_process import LocalEntry
from kernel import in_process as registry
from nodeagent.commands import agent, up


class Toy(api_pb2_grpc.RuntimeServiceServicer, api_pb2_grpc.ImageServiceServicer):
    """A servicer with one verb per outcome; the others answer UNIMPLEMENTED as the generated one does."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self.cancelled = asyncio.Event()

    @rpc
    async def ContainerStatus(self, request, context):
        raise errors.NotFound(f"container {request.container_id!r} not found")

    @rpc
    async def CreateContainer(self, request, context):
        if not request.config.metadata.name:
            raise errors.InvalidArgument("config.metadata.name is empty")
        self.seen.append(request)
        request.config.metadata.name = "changed by the servicer"
        return pb.CreateContainerResponse(container_id="c1")

    @rpc
    async def StopContainer(self, request, context):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return pb.StopContainerResponse()

    @rpc
    async def Version(self, request, context):
        return pb.VersionResponse(runtime_name="toy")

    @rpc
    async def PodSandboxStatus(self, request, context):  # an answer as big as the id asks
        return pb.PodSandboxStatusResponse(info={"big": "x" * int(request.pod_sandbox_id)})

    async def ListImages(self, request, context):  # no @rpc: a code set, then an exception
        context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
        context.set_details("too many")
        raise ValueError("boom")


@contextlib.asynccontextmanager
async def toy_client(way: str, toy: Toy, call_timeout: float = 5.0,
                     limits: tuple[int, int] = (4 << 20, 4 << 20)) -> AsyncIterator[RuntimeClient]:
    """A RuntimeClient reaching `toy` over gRPC on a unix socket, or in process with no socket at all
    (a call that went to the socket would fail UNAVAILABLE)."""
    d = Path(tempfile.mkdtemp(prefix="cri-inproc-"))
    sock = str(d / "cri.sock")
    server = entry = None
    if way == "grpc":
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", limits[0]),
                                          ("grpc.max_send_message_length", limits[1])])
        api_pb2_grpc.add_RuntimeServiceServicer_to_server(toy, server)
        api_pb2_grpc.add_ImageServiceServicer_to_server(toy, server)
        server.add_insecure_port(f"unix://{sock}")
        await server.start()
    else:
        entry = LocalEntry({in_process.RUNTIME: toy, in_process.IMAGES: toy}, *limits)
        in_process.servers.register(sock, entry)
    client = RuntimeClient(f"unix://{sock}", timeout=call_timeout)
    assert client.in_process == (way == "local")
    try:
        yield client
    finally:
        await client.close()
        if server is not None:
            await server.stop(None)
        if entry is not None:
            in_process.servers.unregister(sock, entry)
        shutil.rmtree(d, ignore_errors=True)


Call = Callable[[RuntimeClient], Awaitable[Any]]
CASES: list[tuple[str, Call, grpc.StatusCode]] = [
    ("not found", lambda c: c.container_status("nope"), grpc.StatusCode.NOT_FOUND),
    ("invalid argument", lambda c: c.create_container("s", pb.ContainerConfig(), pb.PodSandboxConfig()),
     grpc.StatusCode.INVALID_ARGUMENT),
    ("deadline", lambda c: c.stop_container("c1"), grpc.StatusCode.DEADLINE_EXCEEDED),
    ("unimplemented", lambda c: c.reopen_container_log("c1"), grpc.StatusCode.UNIMPLEMENTED),
    ("code set, then raised", lambda c: c.list_images(), grpc.StatusCode.RESOURCE_EXHAUSTED),
]


async def _outcome(way: str, call: Call) -> tuple[grpc.StatusCode, str | None, bool]:
    """The error's code and details, and whether the handler was cancelled (by the deadline)."""
    toy = Toy()
    async with toy_client(way, toy, call_timeout=0.3) as client:
        with pytest.raises(grpc.RpcError) as caught:
            await call(client)
        e: Any = caught.value
        if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:  # gRPC's server cancels its handler soon after
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(toy.cancelled.wait(), 2.0)
    assert isinstance(e, grpc.aio.AioRpcError)
    assert is_not_found(e) == (e.code() == grpc.StatusCode.NOT_FOUND)
    assert is_unimplemented(e) == (e.code() == grpc.StatusCode.UNIMPLEMENTED)
    return e.code(), e.details(), toy.cancelled.is_set()


@pytest.mark.parametrize(("case", "call", "code"), CASES, ids=[c[0] for c in CASES])
async def test_an_error_reads_the_same_in_process_as_over_grpc(case, call, code):
    over_grpc = await _outcome("grpc", call)
    local = await _outcome("local", call)
    assert over_grpc[0] == code
    assert local == over_grpc
    assert local[2] == (code == grpc.StatusCode.DEADLINE_EXCEEDED)  # the deadline cancels the handler


async def _too_big(way: str, call: Call) -> tuple[grpc.StatusCode, str | None]:
    async with toy_client(way, Toy(), limits=(1000, 2000)) as client:
        with pytest.raises(grpc.RpcError) as caught:
            await call(client)
    e: Any = caught.value
    return e.code(), e.details()


BIG: list[tuple[str, Call]] = [
    ("request", lambda c: c.create_container("s", pb.ContainerConfig(metadata=pb.ContainerMetadata(
        name="app"), labels={"l": "y" * 1500}), pb.PodSandboxConfig())),
    ("answer", lambda c: c.pod_sandbox_status("3000")),
]


@pytest.mark.parametrize(("what", "call"), BIG, ids=[b[0] for b in BIG])
async def test_a_message_over_the_servers_limits_is_refused_as_grpc_refuses_it(what, call):
    over_grpc = await _too_big("grpc", call)
    assert over_grpc[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await _too_big("local", call) == over_grpc


@pytest.mark.parametrize("way", ["grpc", "local"])
async def test_the_servicer_gets_its_own_copy_of_the_request(way):
    toy = Toy()
    async with toy_client(way, toy) as client:
        req = pb.CreateContainerRequest(pod_sandbox_id="s1")
        req.config.metadata.name = "app"
        r = await client._rt.CreateContainer(req, timeout=5)
        assert r.container_id == "c1"
        assert await client.version() == pb.VersionResponse(runtime_name="toy")
    assert toy.seen[0] is not req
    assert req.config.metadata.name == "app"  # the servicer's change stayed on its side


async def test_a_kubelet_in_the_runtimes_process_calls_it_directly_and_the_socket_serves_the_rest():
    d = Path(tempfile.mkdtemp(prefix="cri-inproc-"))
    sock = d / "cri.sock"
    server, entry = await start_server(cast(Any, None), None, sock)  # Version touches no runtime
    try:
        kubelet = RuntimeClient(str(sock))
        assert kubelet.in_process and isinstance(kubelet._rt, in_process.LocalStub)
        assert (await kubelet.version()).runtime_name
        assert hasattr(kubelet.get_container_events(), "cancel")  # the event stream: over gRPC
        async with grpc.aio.insecure_channel(f"unix://{sock}") as ch:  # crictl's way in
            stub = api_pb2_grpc.RuntimeServiceStub(ch)
            assert (await stub.Version(pb.VersionRequest(), timeout=5)).runtime_name
        stop_local(sock, entry)
        assert in_process.servers.lookup(str(sock)) is None
        assert (await kubelet.version()).runtime_name  # the runtime left the process: the socket
        await kubelet.close()
    finally:
        stop_local(sock, entry)
        await server.stop(None)
        shutil.rmtree(d, ignore_errors=True)


def _configs(module: Any, argv: list[str]) -> Any:
    p = argparse.ArgumentParser()
    module.add_arguments(p)
    return module.config_from_args(p.parse_args(argv))


def test_ups_kubelet_is_pointed_at_the_socket_its_runtime_registers(tmp_path):
    up_ = _configs(up, ["--data-dir", str(tmp_path)])
    agent_ = _configs(agent, ["--data-dir", str(tmp_path), "--server", "https://10.0.0.1:6443",
                              "--token", "abcdef.0123456789abcdef"])
    for configs in (up_, agent_):
        assert configs.cri is not None and configs.kubelet is not None
        kubelet, runtime = configs.kubelet.runtime_endpoint, configs.cri.socket
        assert registry.key(kubelet) == registry.key(runtime)
    external = _configs(up, ["--data-dir", str(tmp_path), "--container-runtime-endpoint",
                             "unix:///run/containerd/containerd.sock"])
    assert external.cri is None  # no runtime of ours registers: the kubelet stays on the socket

"""Assemble the RuntimeService from its verb groups and serve both services on a unix socket."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from cri.client import in_process
from cri.proto import api_pb2_grpc
from cri.server.containers import ContainerVerbs
from cri.server.images import ImageService
from cri.server.in_process import LocalEntry
from cri.server.info import InfoVerbs
from cri.server.sandboxes import SandboxVerbs
from cri.server.stats import StatsVerbs
from cri.server.streaming import StreamingVerbs

if TYPE_CHECKING:
    from cri.images.store import ImageStore
    from cri.runtime.service import Runtime
    from cri.server.stream_server import StreamServer

MAX_MESSAGE = 16 << 20 | 1 << 20  # ExecSync output is capped at 16 MiB per stream
MAX_SEND = MAX_MESSAGE * 2  # an ExecSync answer carries both streams


class RuntimeService(SandboxVerbs, ContainerVerbs, StreamingVerbs, StatsVerbs, InfoVerbs,
                     api_pb2_grpc.RuntimeServiceServicer):
    def __init__(self, runtime: Runtime, streams: StreamServer | None = None) -> None:
        self.runtime = runtime
        self.streams = streams


class ImageServicer(ImageService, api_pb2_grpc.ImageServiceServicer):
    pass


async def start_server(runtime: Runtime, store: ImageStore | None, socket_path: str | Path,
                       streams: StreamServer | None = None) -> tuple[grpc.aio.Server, LocalEntry]:
    """Bind the socket (mode 0600, replacing a stale one) and start serving; the same servicers are
    registered for a kubelet in this process (`cri.client.in_process`) until `stop_local`."""
    path = Path(socket_path)
    _clear_socket(path)
    server = grpc.aio.server(options=[("grpc.max_send_message_length", MAX_SEND),
                                      ("grpc.max_receive_message_length", MAX_MESSAGE)])
    rt, img = RuntimeService(runtime, streams), ImageServicer(store, runtime)
    api_pb2_grpc.add_RuntimeServiceServicer_to_server(rt, server)
    api_pb2_grpc.add_ImageServiceServicer_to_server(img, server)
    server.add_insecure_port(f"unix://{path}")
    old = os.umask(0o177)
    try:
        await server.start()
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    entry = LocalEntry({in_process.RUNTIME: rt, in_process.IMAGES: img}, MAX_MESSAGE, MAX_SEND)
    in_process.servers.register(str(path), entry)
    return server, entry


def stop_local(socket_path: str | Path, entry: LocalEntry) -> None:
    """The in-process entry refuses calls and leaves the registry (the socket's server stops apart)."""
    entry.stop()
    in_process.servers.unregister(str(socket_path), entry)


def _clear_socket(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_socket() or path.exists():
        path.unlink()

"""Assemble the RuntimeService from its verb groups and serve both services on a unix socket."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from cri.proto import api_pb2_grpc
from cri.server.containers import ContainerVerbs
from cri.server.images import ImageService
from cri.server.info import InfoVerbs
from cri.server.sandboxes import SandboxVerbs
from cri.server.stats import StatsVerbs
from cri.server.streaming import StreamingVerbs

if TYPE_CHECKING:
    from cri.images.store import ImageStore
    from cri.runtime.service import Runtime
    from cri.server.stream_server import StreamServer

MAX_MESSAGE = 16 << 20 | 1 << 20  # ExecSync output is capped at 16 MiB per stream


class RuntimeService(SandboxVerbs, ContainerVerbs, StreamingVerbs, StatsVerbs, InfoVerbs,
                     api_pb2_grpc.RuntimeServiceServicer):
    def __init__(self, runtime: Runtime, streams: StreamServer | None = None) -> None:
        self.runtime = runtime
        self.streams = streams


class ImageServicer(ImageService, api_pb2_grpc.ImageServiceServicer):
    pass


async def start_server(runtime: Runtime, store: ImageStore | None, socket_path: str | Path,
                       streams: StreamServer | None = None) -> grpc.aio.Server:
    """Bind the socket (mode 0600, replacing a stale one) and start serving."""
    path = Path(socket_path)
    _clear_socket(path)
    server = grpc.aio.server(options=[("grpc.max_send_message_length", MAX_MESSAGE * 2),
                                      ("grpc.max_receive_message_length", MAX_MESSAGE)])
    api_pb2_grpc.add_RuntimeServiceServicer_to_server(RuntimeService(runtime, streams), server)
    api_pb2_grpc.add_ImageServiceServicer_to_server(ImageServicer(store, runtime), server)
    server.add_insecure_port(f"unix://{path}")
    old = os.umask(0o177)
    try:
        await server.start()
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    return server


def _clear_socket(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_socket() or path.exists():
        path.unlink()

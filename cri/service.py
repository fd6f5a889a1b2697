"""The CRI daemon: recover runtime state, then serve runtime.v1 on a unix socket until cancelled.

`serve(config, ready)` is the component `nodeagent up` runs (config: its UpConfig) and the body of
`nodeagent cri` (config: CRIConfig). Stopping the daemon leaves every pod and container running.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("nodeagent.cri")

DEFAULT_SOCKET = "/run/nodeagent/cri.sock"
DEFAULT_DATA_DIR = "/var/lib/nodeagent"


@dataclasses.dataclass
class CRIConfig:
    socket: str = DEFAULT_SOCKET
    state_dir: str = f"{DEFAULT_DATA_DIR}/cri"
    cni_conf_dir: str = "/etc/cni/net.d"
    cni_bin_dirs: tuple[str, ...] = ("/opt/cni/bin", "/usr/lib/cni")
    registries: str | None = None
    stream_address: str = "127.0.0.1"  # where Exec/Attach/PortForward URLs point
    stream_port: int = 0  # 0: any free port
    images: str | None = None  # image store root (default: beside the state dir, where `nodeagent image` looks)
    cni_socket: str = ""  # NODEAGENT_CNI_SOCKET for our plugins (their cni-daemon); "": the plugins' default

    def image_dir(self) -> Path:
        if self.images:
            return Path(self.images)
        return Path(self.state_dir).parent / "images"

    @classmethod
    def from_any(cls, config: Any) -> CRIConfig:
        """Our own config as is; `nodeagent up`'s config mapped onto its data dir."""
        if isinstance(config, cls):
            return config
        data_dir = getattr(config, "data_dir", None) or DEFAULT_DATA_DIR
        socket = getattr(config, "cri_socket", None) or (
            DEFAULT_SOCKET if str(data_dir) == DEFAULT_DATA_DIR else str(Path(data_dir, "cri.sock")))
        return cls(socket=socket, state_dir=str(Path(data_dir, "cri")),
                   cni_conf_dir=getattr(config, "cni_conf_dir", None) or cls.cni_conf_dir,
                   cni_bin_dirs=tuple(getattr(config, "cni_bin_dirs", None) or cls.cni_bin_dirs),
                   registries=getattr(config, "registries", None),
                   cni_socket=getattr(config, "cni_socket", None) or "")


def open_image_store(root: Path, registries: str | None):
    """The image store (cri.images), or None when this build lacks it."""
    try:
        from cri.images.store import ImageStore
    except ImportError as e:
        log.warning("image store unavailable (%s): image RPCs answer UNIMPLEMENTED", e)
        return None
    regs = None
    if registries:
        from cri.images.registries import RegistriesConfig

        regs = RegistriesConfig.load(Path(registries))
    return ImageStore(root, regs)


async def serve(config: Any, ready: asyncio.Event) -> None:
    if getattr(config, "container_runtime_endpoint", None):
        log.info("using the external runtime at %s; not starting ours", config.container_runtime_endpoint)
        ready.set()
        await asyncio.Event().wait()
    cfg = CRIConfig.from_any(config)
    from cni.invoke import CNI
    from cri.runtime.cgroups import detect
    from cri.runtime.service import Runtime, RuntimeOptions
    from cri.server.app import start_server

    state = Path(cfg.state_dir)
    opts = RuntimeOptions(state_dir=state, cni_conf_dir=cfg.cni_conf_dir, cni_bin_dirs=tuple(cfg.cni_bin_dirs),
                          registries=cfg.registries)
    _check_binaries(opts)
    store = await asyncio.to_thread(open_image_store, cfg.image_dir(), cfg.registries)
    cni = CNI(cfg.cni_conf_dir, list(cfg.cni_bin_dirs), opts.cni_cache_dir,
              env={"NODEAGENT_CNI_SOCKET": cfg.cni_socket} if cfg.cni_socket else None)
    runtime = Runtime(opts, detect(), images=store, cni=cni)
    await runtime.start()
    from cri.server.stream_server import StreamServer

    streams = StreamServer(runtime, cfg.stream_address, cfg.stream_port)
    await streams.start()
    server = await start_server(runtime, store, cfg.socket, streams)
    log.info("CRI runtime.v1 serving on unix://%s (state in %s)", cfg.socket, state)
    ready.set()
    try:
        await server.wait_for_termination()
    finally:
        with contextlib.suppress(Exception):
            await asyncio.shield(server.stop(grace=1))
        with contextlib.suppress(Exception):
            await streams.stop()
        await runtime.close()
        _unlink(cfg.socket)


def _check_binaries(opts: Any) -> None:
    for binary in (opts.pause, opts.shim, opts.launcher):
        if not Path(binary).exists():
            raise FileNotFoundError(f"{binary} is missing: run `make build` (target cri-bin)")


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        Path(path).unlink()

"""The CRI daemon: recover runtime state, then serve runtime.v1 on a unix socket until cancelled.

`serve(config, ready)` is the `cri` component of `nodeagent up` / `agent` and the body of `nodeagent cri`.
Stopping the daemon leaves every pod and container running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from cri.config import CRIConfig

if TYPE_CHECKING:
    from cri.images.store import ImageStore
    from cri.runtime.core import RuntimeOptions

log = logging.getLogger("nodeagent.cri")


def open_image_store(root: Path, registries: str | None) -> ImageStore | None:
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


async def serve(config: CRIConfig, ready: asyncio.Event) -> None:
    from cni.invoke import CNI
    from cri.runtime.service import Runtime, RuntimeOptions
    from cri.server.app import start_server, stop_local
    from kernel.cgroups import detect

    cfg = config
    state = Path(cfg.state_dir)
    opts = RuntimeOptions(state_dir=state, cni_conf_dir=cfg.cni_conf_dir,
                          cni_bin_dirs=tuple(cfg.cni_bin_dirs), registries=cfg.registries)
    _check_binaries(opts)
    assert opts.cni_cache_dir is not None  # RuntimeOptions derives it from the state dir
    store = await asyncio.to_thread(open_image_store, Path(cfg.image_dir), cfg.registries)
    cni = CNI(cfg.cni_conf_dir, list(cfg.cni_bin_dirs), opts.cni_cache_dir,
              env={"NODEAGENT_CNI_SOCKET": cfg.cni_socket} if cfg.cni_socket else None)
    runtime = Runtime(opts, detect(), images=store, cni=cni)
    await runtime.start()
    from cri.server.stream_server import StreamServer

    streams = StreamServer(runtime, cfg.stream_address, cfg.stream_port)
    await streams.start()
    server, local = await start_server(runtime, store, cfg.socket, streams)
    log.info("CRI runtime.v1 serving on unix://%s (state in %s)", cfg.socket, state)
    ready.set()
    try:
        async with asyncio.TaskGroup() as tg:
            watcher = tg.create_task(watch_registries(store, Path(cfg.registries))) \
                if store is not None and cfg.registries else None
            await server.wait_for_termination()
            if watcher is not None:
                watcher.cancel()
    finally:
        stop_local(cfg.socket, local)
        with contextlib.suppress(Exception):
            await asyncio.shield(server.stop(grace=1))
        with contextlib.suppress(Exception):
            await streams.stop()
        await runtime.close()
        _unlink(cfg.socket)


REGISTRIES_POLL = 2.0  # seconds between looks at registries.yaml


async def watch_registries(store: ImageStore, path: Path) -> None:
    """Re-read registries.yaml when it changes (k3s needs a restart; a lab edits it live): the next pull
    uses the new mirrors and auth. A file that no longer parses is reported and the last good one kept;
    a removed file means no configuration."""
    from cri.images.registries import RegistriesConfig, RegistriesConfigError

    def stamp() -> tuple[int, int, int] | None:
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    seen = await asyncio.to_thread(stamp)
    while True:
        await asyncio.sleep(REGISTRIES_POLL)
        now = await asyncio.to_thread(stamp)
        if now == seen:
            continue
        seen = now
        if now is None:
            store.registries = RegistriesConfig()
            log.warning("registries %s removed: pulls use no mirrors or credentials until it is back", path)
            continue
        try:
            store.registries = await asyncio.to_thread(RegistriesConfig.load, path)
        except (OSError, RegistriesConfigError) as e:
            log.error("registries %s not reloaded, the previous one stays in use: %s; fix the file", path, e)
            continue
        mirrors = ", ".join(store.registries.mirrors) or "none"
        log.info("registries %s reloaded: mirrors for %s", path, mirrors)


def _check_binaries(opts: RuntimeOptions) -> None:
    for binary in (opts.pause, opts.shim, opts.launcher):
        if not Path(binary).exists():
            raise FileNotFoundError(f"{binary} is missing: run `make build` (target cri-bin)")


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        Path(path).unlink()

"""The resident CNI daemon: keeps pyroute2 imported and netlink sockets open, serves plugin calls.

The exec'd thin client (C, or `cni.client`) sends plugin, env and stdin (wire format in
`cni.client`); the daemon runs exactly the `skel.dispatch` the in-process fallback runs
and answers with the exit status and stdout.
A fixed pool of worker threads (each with its own netlink socket); IPAM correctness never depends
on the daemon (its flock works between threads as between processes).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import socket
import socketserver
import threading
import time
from typing import TYPE_CHECKING, Any

from cni import client, skel
from cni.errors import DECODE_FAILURE, CNIError

if TYPE_CHECKING:
    from cni.skel import Plugin

log = logging.getLogger("nodeagent.cni.daemon")


def _plugins() -> dict[str, Plugin]:
    from cni.plugins.bridge import Bridge
    from cni.plugins.host_local import HostLocal
    from cni.plugins.portmap import Portmap

    return {"bridge": Bridge(), "host-local": HostLocal(), "portmap": Portmap()}


def _listening(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


class _Handler(socketserver.StreamRequestHandler):
    server: Server

    def handle(self) -> None:
        raw = self.rfile.read()
        try:
            name, env, stdin = client.decode_request(raw)
            plugin = self.server.plugins[name]
        except (ValueError, KeyError) as e:
            err = CNIError(DECODE_FAILURE, "bad cni daemon request", str(e)).to_json("1.0.0")
            self.wfile.write(b"1\n" + json.dumps(err).encode() + b"\n")
            return
        t0 = time.perf_counter()
        code, out = skel.dispatch(plugin, env, stdin)
        log.debug("%s %s %s -> %d in %.1f ms", name, env.get("CNI_COMMAND"), env.get("CNI_CONTAINERID"),
                  code, (time.perf_counter() - t0) * 1e3)
        self.wfile.write(f"{code}\n".encode() + out)


class Server(socketserver.UnixStreamServer):
    """Requests run on a fixed pool, so each worker keeps its netlink socket across requests."""

    def __init__(self, path: str, workers: int = 8) -> None:
        self.plugins = _plugins()
        self.pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="cni")
        from kernel import netlink

        netlink.host()  # warm: pyroute2 imported, one socket open
        if os.path.exists(path):
            if _listening(path):
                raise RuntimeError(f"a cni daemon already serves {path}")
            os.unlink(path)  # stale socket of a dead daemon
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        super().__init__(path, _Handler)
        os.chmod(path, 0o600)
        self.path = path

    def process_request(self, request: Any, client_address: Any) -> None:
        self.pool.submit(self._work, request, client_address)

    def _work(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        self.pool.shutdown(wait=True)


def serve(path: str, ready: threading.Event | None = None) -> None:
    srv = Server(path)
    log.info("cni daemon listening on %s", path)
    if ready:
        ready.set()
    try:
        srv.serve_forever(poll_interval=0.2)
    finally:
        srv.server_close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

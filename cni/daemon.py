"""The resident CNI daemon: keeps pyroute2 imported and netlink sockets open, serves plugin calls.

The lean exec'd client sends {plugin, env, stdin}; the daemon runs exactly the
same `skel.dispatch` the in-process fallback runs and answers {code, stdout}.
A fixed pool of worker threads (each with its own netlink socket); IPAM correctness never depends on the daemon (its
flock works between threads as between processes).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import socketserver
import threading
from typing import Any

from cni import skel

log = logging.getLogger("nodeagent.cni.daemon")


def _plugins() -> dict[str, Any]:
    from cni.plugins.bridge import Bridge
    from cni.plugins.host_local import HostLocal
    from cni.plugins.portmap import Portmap

    return {"bridge": Bridge(), "host-local": HostLocal(), "portmap": Portmap()}


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        raw = self.rfile.read()
        try:
            req = json.loads(raw)
            plugin = self.server.plugins[req["plugin"]]  # type: ignore[attr-defined]
            env = {str(k): str(v) for k, v in req["env"].items()}
            stdin = str(req.get("stdin", "")).encode()
        except (ValueError, KeyError, AttributeError) as e:
            self.wfile.write(json.dumps({"code": 1, "stdout": json.dumps(
                {"cniVersion": "1.0.0", "code": 6, "msg": "bad daemon request", "details": str(e)})}).encode())
            return
        code, out = skel.dispatch(plugin, env, stdin)
        log.debug("%s %s %s -> %d", req["plugin"], env.get("CNI_COMMAND"), env.get("CNI_CONTAINERID"), code)
        self.wfile.write(json.dumps({"code": code, "stdout": out.decode()}).encode())


class Server(socketserver.UnixStreamServer):
    """Requests run on a fixed pool, so each worker keeps its netlink socket across requests."""

    def __init__(self, path: str, workers: int = 8) -> None:
        self.plugins = _plugins()
        self.pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="cni")
        from cni import netlink

        netlink.host()  # warm: pyroute2 imported, one socket open
        if os.path.exists(path):
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

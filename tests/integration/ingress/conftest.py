"""A real `nodeagent server` (memory store, without its own ingress part), HTTP backends on loopback
addresses standing in for pods, and a real `nodeagent ingress` process (HAProxy) in front of them."""

from __future__ import annotations

import asyncio
import http.server
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.client.rest import Client
from nodeagent.testing.apiserver import ServerProcess, start_server


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        srv = self.server
        assert isinstance(srv, Backend)
        body = f"{srv.name} {self.headers.get('Host')} {self.path} {self.headers.get('X-Forwarded-Proto')}\n"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Seen", f"set={self.headers.get('X-Set')} gone={self.headers.get('X-Gone')}")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Backend(http.server.ThreadingHTTPServer):
    """An HTTP server answering "<name> <host> <path> <x-forwarded-proto>"."""

    daemon_threads = True

    def __init__(self, name: str, address: tuple[str, int]) -> None:
        self.name = name
        super().__init__(address, _Handler)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def backends() -> Iterator[tuple[int, list[Backend]]]:
    """Three backends on 127.0.0.2-4, one port."""
    for _ in range(20):
        port = free_port("127.0.0.2")
        made: list[Backend] = []
        try:
            for i in (2, 3, 4):
                made.append(Backend(f"pod{i}", (f"127.0.0.{i}", port)))
        except OSError:
            for b in made:
                b.server_close()
            continue
        threads = [threading.Thread(target=b.serve_forever, daemon=True) for b in made]
        for t in threads:
            t.start()
        yield port, made
        for b in made:
            b.shutdown()
            b.server_close()
        return
    raise RuntimeError("no port free on 127.0.0.2-4")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("ing-api"), extra=["--without", "ingress"])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def api(server: ServerProcess) -> Callable[..., Any]:
    """api(lambda c: c.create(...)): one call on a fresh client in its own event loop (sync tests)."""

    def call(fn: Callable[[Client], Any]) -> Any:
        async def go() -> Any:
            async with Client(server.url, server.token, ca_file=str(server.ca_file)) as c:
                return await fn(c)

        return asyncio.run(go())

    return call


class IngressProcess:
    def __init__(self, proc: subprocess.Popen[bytes], work_dir: Path, http: int, https: int,
                 log: Path) -> None:
        self.proc, self.work_dir, self.http, self.https, self.log_path = proc, work_dir, http, https, log
        self.metrics = 0

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def haproxy_pids(self) -> list[int]:
        """Live HAProxy processes serving this work dir."""
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z" and cmd and cmd[0].endswith(b"haproxy") and \
                    str(self.work_dir / "haproxy.cfg").encode() in cmd:
                out.append(int(entry.name))
        return out


def start_ingress(server: ServerProcess, work_dir: Path, *extra: str) -> IngressProcess:
    http, https, metrics = free_port("127.0.0.1"), free_port("127.0.0.1"), free_port("127.0.0.1")
    work_dir.mkdir(parents=True, exist_ok=True)
    log = work_dir / "ingress.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "ingress",
                                 "--kubeconfig", str(server.kubeconfig), "--work-dir", str(work_dir),
                                 "--listen-address", "127.0.0.1", "--ingress-http-port", str(http),
                                 "--ingress-https-port", str(https), "--ingress-metrics-port", str(metrics),
                                 *extra],
                                stdout=f, stderr=subprocess.STDOUT)
    ing = IngressProcess(proc, work_dir, http, https, log)
    ing.metrics = metrics
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nodeagent ingress exited {proc.returncode}:\n{ing.log()}")
        if "ingress: serving" in ing.log():
            return ing
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"nodeagent ingress did not serve in 30s:\n{ing.log()}")


def eventually(fn: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05) -> Any:
    """fn() until it returns truthy (bounded wait for watch propagation), else its last result."""
    deadline = time.monotonic() + timeout
    while True:
        out = fn()
        if out or time.monotonic() > deadline:
            return out
        time.sleep(interval)

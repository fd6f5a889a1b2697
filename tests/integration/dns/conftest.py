"""A real `nodeagent server` (memory store), a real `nodeagent dns` process on 127.0.0.1, and a small
upstream resolver on another loopback port standing in for the node's resolvers (no internet)."""

from __future__ import annotations

import asyncio
import re
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from nodeagent.client.rest import Client
from nodeagent.testing.apiserver import start_server

UPSTREAM_ZONE = "example.test."
UPSTREAM_ANSWERS = {"www.example.test.": "203.0.113.10", "api.example.test.": "203.0.113.11"}


class Upstream(socketserver.ThreadingUDPServer):
    """Answers A for UPSTREAM_ANSWERS (TTL 60), NXDOMAIN with an SOA otherwise; counts questions."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _UpstreamHandler)
        self.asked: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    @property
    def port(self) -> int:
        return self.server_address[1]

    def count(self, name: str) -> int:
        with self.lock:
            return sum(1 for n, _ in self.asked if n == name)


class _UpstreamHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data, sock = self.request
        q = dns.message.from_wire(data)
        srv = self.server
        assert isinstance(srv, Upstream)
        qn = q.question[0].name.to_text().lower()
        with srv.lock:
            srv.asked.append((qn, q.question[0].rdtype))
        r = dns.message.make_response(q, recursion_available=True)
        if qn in UPSTREAM_ANSWERS:
            if q.question[0].rdtype == dns.rdatatype.A:
                r.answer.append(dns.rrset.from_text(q.question[0].name, 60, "IN", "A", UPSTREAM_ANSWERS[qn]))
            else:
                r.authority.append(_soa())
        else:
            r.set_rcode(dns.rcode.NXDOMAIN)
            r.authority.append(_soa())
        sock.sendto(r.to_wire(), self.client_address)


def _soa() -> dns.rrset.RRset:
    return dns.rrset.from_text(UPSTREAM_ZONE, 300, "IN", "SOA",
                               "ns.example.test. host.example.test. 1 2 3 4 30")


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    up = Upstream()
    t = threading.Thread(target=up.serve_forever, name="test-upstream", daemon=True)
    t.start()
    yield up
    up.shutdown()
    up.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("dns-apiserver"))
    yield srv
    srv.stop()


class DnsProcess:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log_path = proc, port, log

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def dnsd(server, upstream, tmp_path_factory) -> Iterator[DnsProcess]:
    log = tmp_path_factory.mktemp("dnsd") / "dns.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "dns", "--kubeconfig",
                                 str(server.kubeconfig),
                                 "--listen", "127.0.0.1:0", "--upstream", f"127.0.0.1:{upstream.port}"],
                                stdout=f, stderr=subprocess.STDOUT)
    port = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        m = re.search(r"serving on 127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
        if m:
            port = int(m.group(1))
            break
        time.sleep(0.05)
    if not port:
        proc.kill()
        proc.wait()
        raise RuntimeError("nodeagent dns did not start:\n" + log.read_text(errors="replace"))
    d = DnsProcess(proc, port, log)
    yield d
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, d.log()


@pytest.fixture(scope="module")
def api(server) -> Callable[..., Any]:
    """api(lambda c: c.create(...)): one call on a fresh client in its own event loop (sync tests)."""

    def call(fn: Callable[[Client], Any]) -> Any:
        async def go() -> Any:
            async with Client(server.url, server.token, ca_file=str(server.ca_file)) as c:
                return await fn(c)

        return asyncio.run(go())

    return call


def eventually(fn: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05) -> Any:
    """fn() until it returns truthy (bounded wait for watch propagation), else its last result."""
    deadline = time.monotonic() + timeout
    while True:
        out = fn()
        if out or time.monotonic() > deadline:
            return out
        time.sleep(interval)

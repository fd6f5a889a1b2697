"""Tiny TCP servers/clients run inside test netns (loopback and test-netns addresses only)."""

from __future__ import annotations

import random
import subprocess
import sys
import time

SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(16); s.settimeout(30)
print("ready", flush=True)
for _ in range(int(sys.argv[2])):
    c, peer = s.accept()
    c.sendall(("hello " + peer[0] + "\n").encode()); c.close()
"""

CLIENT = r"""
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
print(c.recv(100).decode().strip())
"""


def free_port() -> int:
    return random.randint(20000, 60000)


def serve(ns: str, port: int, count: int) -> subprocess.Popen:
    """A server in `ns` answering `count` connections with 'hello <peer address>'."""
    p = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", SERVER, str(port), str(count)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout and p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
    return p


def connect(ns: str | None, addr: str, port: int) -> str:
    """'hello <address the server saw>' or '' if the connection failed."""
    argv = [sys.executable, "-c", CLIENT, addr, str(port)]
    if ns:
        argv = ["ip", "netns", "exec", ns, *argv]
    for _ in range(3):
        p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        if p.returncode == 0:
            return p.stdout.strip()
        time.sleep(0.3)
    return ""


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
    p.wait(timeout=10)

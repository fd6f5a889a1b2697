"""A private etcd for tests and benchmarks: Debian's /usr/bin/etcd on 127.0.0.1, free ports, a tmp data dir.

    with EtcdServer() as etcd:          # started and healthy
        store = EtcdStore(etcd.endpoints)
    with EtcdCluster(3) as cluster:     # three members; cluster.members[i].kill() / .start()
        store = EtcdStore(cluster.endpoints)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from typing import BinaryIO

ETCD = "/usr/bin/etcd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def available() -> str | None:
    """None if etcd can be started here, else the reason it cannot."""
    if not os.access(ETCD, os.X_OK):
        return f"{ETCD} not installed (Debian package etcd-server)"
    return None


class EtcdServer:
    """One single-member etcd cluster; stop() kills it and removes its data dir."""

    def __init__(self, name: str = "test", data_dir: str | None = None, binary: str = ETCD) -> None:
        self.name = name
        self.binary = binary
        self._own_dir = data_dir is None
        self.dir = data_dir or tempfile.mkdtemp(prefix="nodeagent-etcd-")
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen | None = None
        self._log: BinaryIO | None = None  # the member's log file while it runs
        self.initial_cluster: str | None = None  # set by EtcdCluster; default: this member alone

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def endpoints(self) -> list[str]:
        return [self.endpoint]

    def start(self, timeout: float = 30.0) -> EtcdServer:
        self.launch()
        return self.wait_healthy(timeout)

    def launch(self) -> None:
        """Start the process without waiting (a cluster member is healthy only once a quorum runs)."""
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        argv = [
            self.binary,
            f"--name={self.name}",
            f"--data-dir={os.path.join(self.dir, 'data')}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={self.initial_cluster or f'{self.name}={peer}'}",
            "--initial-cluster-state=new",
            "--log-level=error",
            "--logger=zap",
        ]
        os.makedirs(self.dir, exist_ok=True)
        self._log = open(os.path.join(self.dir, "etcd.log"), "ab")  # closed in kill()
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_healthy(self, timeout: float = 30.0) -> EtcdServer:
        assert self.proc is not None
        client = f"http://127.0.0.1:{self.client_port}"
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                log = self.log_tail()
                self.stop()
                raise RuntimeError(f"etcd exited with {self.proc.returncode}: {log}")
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1) as r:
                    if b'"true"' in r.read():
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                log = self.log_tail()
                self.stop()
                raise RuntimeError(f"etcd not healthy after {timeout}s: {log}")
            time.sleep(0.1)

    def log_tail(self, n: int = 2000) -> str:
        with contextlib.suppress(OSError), open(os.path.join(self.dir, "etcd.log"), "rb") as f:
            return f.read()[-n:].decode(errors="replace")
        return ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Stop the process only (the data dir stays, so start() can bring the member back)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> EtcdServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EtcdCluster:
    """`size` members on 127.0.0.1, all under one tmp dir that stop() removes."""

    def __init__(self, size: int = 3, name: str = "m") -> None:
        self.dir = tempfile.mkdtemp(prefix="nodeagent-etcd-cluster-")
        self.members = [EtcdServer(f"{name}{i}", os.path.join(self.dir, f"{name}{i}")) for i in range(size)]
        peers = ",".join(f"{m.name}=http://127.0.0.1:{m.peer_port}" for m in self.members)
        for m in self.members:
            m.initial_cluster = peers

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    def start(self, timeout: float = 60.0) -> EtcdCluster:
        try:
            for m in self.members:
                m.launch()
            for m in self.members:
                m.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for m in self.members:
            m.kill(signal.SIGTERM)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

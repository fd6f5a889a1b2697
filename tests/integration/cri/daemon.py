"""Start and stop `nodeagent cri` for tests: private socket, state dir, CNI conf dir and image store."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cri.client import CRIClient
from cri.proto import api_pb2 as pb


class CRIDaemon:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.socket = str(self.root / "cri.sock")
        self.state = self.root / "state"
        self.images = self.root / "images"
        self.cni_conf = self.root / "net.d"
        self.cni_conf.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None
        self.client: CRIClient | None = None
        self.log = self.root / "daemon.log"
        self.cni_bin_dir = "/usr/lib/cni"  # Debian's reference plugins
        self.extra_args: list[str] = []  # more `nodeagent cri` flags (e.g. --cni-socket)

    def import_images(self, archives: list[Path]) -> None:
        from cri.images.store import ImageStore

        store = ImageStore(self.images)
        for a in archives:
            store.import_archive(Path(a))

    def start(self) -> CRIClient:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nodeagent", "--log-level", "info", "cri", "--socket", self.socket,
             "--state-dir", str(self.state), "--cni-conf-dir", str(self.cni_conf), "--cni-bin-dir", self.cni_bin_dir,
             *self.extra_args],
            stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, env=env)
        self.client = CRIClient(self.socket)
        try:
            self.client.wait_ready(60)
        except Exception:
            self.kill()
            raise RuntimeError(f"cri daemon did not start:\n{self.log.read_text()[-3000:]}") from None
        return self.client

    def kill(self) -> None:
        """kill -9: the runtime dies, its pods and containers must not."""
        if self.client:
            self.client.close()
            self.client = None
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.client:
            self.client.close()
            self.client = None
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def remove_everything(self) -> None:
        """Remove every sandbox the daemon knows (tests clean their own; this catches failures)."""
        c = self.client
        if c is None:
            return
        for s in c.rt.ListPodSandbox(pb.ListPodSandboxRequest()).items:
            with contextlib.suppress(Exception):
                c.stop_sandbox(s.id)
                c.remove_sandbox(s.id)


def mounts_under(path: Path) -> list[str]:
    p = str(path)
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(p)]


def reap(pids: list[int]) -> None:
    """Collect exited processes that were re-parented to the test process (pytest is a subreaper)."""
    deadline = time.monotonic() + 5
    for pid in pids:
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.02)

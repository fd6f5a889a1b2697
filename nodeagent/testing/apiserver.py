"""Start a real `nodeagent server` process on 127.0.0.1 with a free port and a tmp data dir (tests,
benchmarks)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import yaml


@dataclasses.dataclass
class ServerProcess:
    proc: subprocess.Popen
    data_dir: Path
    kubeconfig: Path
    url: str
    token: str
    ca_file: Path
    log_path: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def env(self) -> dict[str, str]:
        """For kubectl: this server's kubeconfig, and a HOME of its own (kubectl's discovery cache goes
        there)."""
        home = self.data_dir / "home"
        home.mkdir(exist_ok=True)
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "HOME": str(home)}

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def start_server(data_dir: Path, datastore: str = "memory", port: int = 0, extra: Sequence[str] = (),
                 timeout: float = 30, dns: bool = False, launcher: Sequence[str] = ()) -> ServerProcess:
    """A server on 127.0.0.1; without its DNS unless asked, so parallel test servers do not contend for
    :53. `launcher` goes between the interpreter and `-m nodeagent` (a profiler's wrapper script)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    kc = data_dir / "admin.kubeconfig"
    if kc.exists():
        kc.unlink()
    log_path = data_dir / "server.log"
    logf = open(log_path, "ab")
    proc = subprocess.Popen([sys.executable, *launcher, "-m", "nodeagent", "server",
                             "--data-dir", str(data_dir), "--bind-address", "127.0.0.1", "--port", str(port),
                             "--datastore", datastore,
                             *([] if dns else ["--without", "dns"]), *extra],
                            stdout=logf, stderr=subprocess.STDOUT)
    logf.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}:\n{log_path.read_text()}")
        if kc.exists():
            cfg = yaml.safe_load(kc.read_text())
            url = cfg["clusters"][0]["cluster"]["server"]
            token = cfg["users"][0]["user"]["token"]
            return ServerProcess(proc, data_dir, kc, url, token, data_dir / "pki" / "ca.crt", log_path)
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"server did not start in {timeout}s:\n{log_path.read_text()}")

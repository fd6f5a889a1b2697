"""Start and stop `nodeagent cri` for tests: private socket, state dir, CNI conf dir and image store.

Like containerd, the runtime refuses a pod network while its CNI conf dir holds no network, so a daemon
gets one of its own unless asked not to (`network=False`): our bridge plugin on a bridge and a free /24
of its own, removed by `close()` (or the session's janitor, if a test is interrupted)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from cri.client import CRIClient
from tests.harness.resources import JANITOR, del_link, free_subnet, unique
from tests.integration.cri.launch import mounts_under, start_runtime, stop_process

__all__ = ["CRIDaemon", "mounts_under", "reap"]


HARNESS_CONFLIST = "50-harness.conflist"  # after a test's own 10-*.conflist, which then wins


class CRIDaemon:
    def __init__(self, root: Path, network: bool = True) -> None:
        self.root = Path(root)
        self.socket = str(self.root / "cri.sock")
        self.state = self.root / "state"
        self.images = self.root / "images"
        self.cni_conf = self.root / "net.d"
        self.cni_conf.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None
        self.client: CRIClient | None = None
        self.log = self.root / "daemon.log"
        self.registries: Path | None = None  # registries.yaml passed as --registries
        self.cni_bin_dir = "/usr/lib/cni"  # Debian's reference plugins
        self.extra_args: list[str] = []  # more `nodeagent cri` flags (e.g. --cni-socket)
        self.bridge: str | None = None
        if network:
            self._pod_network()

    def _pod_network(self) -> None:
        """Our launchers beside the reference plugins, and a conflist of our bridge plugin; the plugins
        run in the runtime's process (NODEAGENT_CNI_SOCKET=none: no other run's cni-daemon)."""
        from cni.install import install

        bin_dir = self.root / "cnibin"
        install(str(bin_dir), None, sys.executable)
        for name in os.listdir("/usr/lib/cni"):
            if not (bin_dir / name).exists():
                (bin_dir / name).symlink_to(os.path.join("/usr/lib/cni", name))
        self.cni_bin_dir = str(bin_dir)
        self.extra_args += ["--cni-socket", "none"]
        self.bridge = bridge = unique("cb")
        JANITOR.register(f"link {bridge}", lambda: del_link(bridge))
        doc = {"cniVersion": "1.0.0", "name": f"harness-{bridge}", "plugins": [
            {"type": "nodeagent-bridge", "bridge": bridge, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "nodeagent-host-local", "ranges": [[{"subnet": str(free_subnet())}]],
                      "dataDir": str(self.root / "ipam"), "routes": [{"dst": "0.0.0.0/0"}]}}]}
        (self.cni_conf / HARNESS_CONFLIST).write_text(json.dumps(doc))

    def close(self) -> None:
        """Remove the daemon's bridge (after its pods are gone and it is stopped)."""
        if self.bridge is not None:
            JANITOR.release(f"link {self.bridge}")
            self.bridge = None

    def import_images(self, archives: list[Path]) -> None:
        from cri.images.store import ImageStore

        store = ImageStore(self.images)
        for a in archives:
            store.import_archive(Path(a))

    def start(self) -> CRIClient:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc, self.client = start_runtime(
            [sys.executable, "-m", "nodeagent", "--log-level", "info", "cri", "--socket", self.socket,
             "--state-dir", str(self.state), "--cni-conf-dir", str(self.cni_conf), "--cni-bin-dir",
             self.cni_bin_dir,
             *(["--registries", str(self.registries)] if self.registries else []), *self.extra_args],
            self.log, self.socket, env=env)
        return self.client

    def kill(self) -> None:
        """kill -9: the runtime dies, its pods and containers must not."""
        self._close_client()
        stop_process(self.proc, grace=0)

    def stop(self) -> None:
        self._close_client()
        stop_process(self.proc, grace=20)

    def _close_client(self) -> None:
        if self.client:
            self.client.close()
            self.client = None

    def remove_everything(self) -> None:
        """Remove every sandbox the daemon knows (tests clean their own; this catches failures)."""
        c = self.client
        if c is None:
            return
        for s in c.list_pod_sandbox():
            with contextlib.suppress(Exception):
                c.stop_pod_sandbox(s.id)
                c.remove_pod_sandbox(s.id)


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

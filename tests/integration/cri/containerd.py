"""Debian's containerd as a peer runtime for the CRI client tests: private socket, root, state, config."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from pathlib import Path

from cri.client import CRIClient
from nodeagent.testing.images import BUSYBOX, Entry, ImageFactory, ImageSpec
from tests.integration.cri.launch import mounts_under, start_runtime, stop_process

PAUSE_REF = "localhost/pause:3.6"

CONFIG = """version = 2
root = "{root}/root"
state = "{root}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{root}/containerd.sock"
[ttrpc]
  address = "{root}/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  # root here lacks CAP_SYS_RESOURCE: runc may not lower oom_score_adj (-998 for pause) below ours
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{root}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{root}/net.d"
"""


def pause_spec(pause_binary: str) -> ImageSpec:
    return ImageSpec("localhost/pause", "3.6", entrypoint=("/pause",), cmd=None,
                     extra_layers=((Entry("pause", data=Path(pause_binary).read_bytes(), mode=0o755),),))


def available() -> str:
    """Why containerd cannot be used here, or "" when it can."""
    for tool in ("containerd", "ctr", "runc"):
        if not shutil.which(tool):
            return f"{tool} is not installed (make install adds containerd and runc)"
    return ""


class Containerd:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.socket = str(self.root / "containerd.sock")
        self.cni_conf = self.root / "net.d"
        self.proc: subprocess.Popen | None = None
        self.client: CRIClient | None = None
        self.extra_config = ""  # appended to config.toml (e.g. registry mirrors)

    # containerd 1.6's CNI library caches results under /var/lib/cni (not configurable): note what
    # existed before, so what it created (when left empty) can be removed afterwards.
    HOST_CNI_CACHE = (Path("/var/lib/cni"), Path("/var/lib/cni/results"))

    def start(self) -> CRIClient:
        self._had = {p: p.exists() for p in self.HOST_CNI_CACHE}
        self.cni_conf.mkdir(parents=True, exist_ok=True)
        cfg = self.root / "config.toml"
        cfg.write_text(CONFIG.format(root=self.root, pause=PAUSE_REF) + self.extra_config)
        try:
            self.proc, self.client = start_runtime(["containerd", "--config", str(cfg)], self.root / "log",
                                                   self.socket, new_session=True)
        except Exception:
            self.stop()
            raise
        return self.client

    def import_images(self, factory: ImageFactory, pause_binary: str, specs: list[ImageSpec]) -> None:
        for spec in [pause_spec(pause_binary), BUSYBOX, *specs]:
            built = factory.get(spec)
            p = subprocess.run(["ctr", "-a", self.socket, "-n", "k8s.io", "images", "import",
                                str(built.docker_archive)],
                               capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError(f"ctr import {spec.ref}: {p.stderr}")

    def stop(self) -> None:
        if self.client:
            self.client.close()
            self.client = None
        stop_process(self.proc, grace=30)
        # containerd leaves its metadata mounts (e.g. the snapshotter's) to the host; drop ours.
        for point in sorted(mounts_under(self.root), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        for p in reversed(self.HOST_CNI_CACHE):
            if not getattr(self, "_had", {}).get(p, True):
                with contextlib.suppress(OSError):
                    p.rmdir()  # only when empty: another user's results stay
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                shutil.rmtree(self.root / "state")
                break
            time.sleep(0.1)

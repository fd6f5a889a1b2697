"""The CRI daemon's configuration: concrete paths, given by whoever starts it (`nodeagent cri` from its
flags, `nodeagent up` / `agent` from the instance's layout); the runtime derives none of them itself."""

from __future__ import annotations

import dataclasses

DEFAULT_CNI_BIN_DIRS = ("/opt/cni/bin", "/usr/lib/cni")  # where CNI plugins usually are


@dataclasses.dataclass(frozen=True)
class CRIConfig:
    socket: str  # the unix socket runtime.v1 is served on
    state_dir: str  # the runtime's state: sandboxes, containers, CNI result cache
    image_dir: str  # the image store's root (shared with `nodeagent image`)
    cni_conf_dir: str
    cni_bin_dirs: tuple[str, ...] = DEFAULT_CNI_BIN_DIRS
    cni_socket: str = ""  # NODEAGENT_CNI_SOCKET for our plugins (their cni-daemon); "": the plugins' default
    registries: str | None = None  # registries.yaml (k3s format)
    stream_address: str = "127.0.0.1"  # where Exec/Attach/PortForward URLs point
    stream_port: int = 0  # 0: any free port

    def __post_init__(self) -> None:
        for name in ("socket", "state_dir", "image_dir", "cni_conf_dir"):
            if not getattr(self, name):
                raise ValueError(f"cri: {name} is empty")
        if not self.cni_bin_dirs:
            raise ValueError("cri: no CNI plugin directory")
        if not 0 <= self.stream_port <= 65535:
            raise ValueError(f"cri: stream port {self.stream_port}: not a TCP port")

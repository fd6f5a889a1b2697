"""The pod network of one `nodeagent up` instance: its CNI conflist, bridge, subnet and IPAM dir.

Every name is derived from the data dir (or given), so several instances on one host never share a
bridge, a masquerade chain (named after the network) or an allocation directory. `serve` is the `cni`
component of `nodeagent up`: it writes the conflist before the runtime reads it and, when the instance
stops with no pod left on the bridge, deletes the bridge and the empty allocation dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("nodeagent.kubelet.network")

DEFAULT_DATA_DIR = "/var/lib/nodeagent"
DEFAULT_CNI_SOCKET = "/run/nodeagent/cni.sock"  # cni.client's default


@dataclasses.dataclass(frozen=True)
class PodNetwork:
    name: str
    bridge: str
    subnet: str
    conf_dir: str
    ipam_dir: str
    daemon_socket: str = ""  # the instance's `cni-daemon` socket (NODEAGENT_CNI_SOCKET of its plugins)

    @classmethod
    def from_any(cls, config: Any) -> PodNetwork:
        from nodeagent.kubelet.agent import instance_tag

        data_dir = str(getattr(config, "data_dir", None) or DEFAULT_DATA_DIR)
        default = data_dir == DEFAULT_DATA_DIR
        tag = instance_tag(data_dir)
        return cls(name="nodeagent" if default else f"nodeagent-{tag}",
                   bridge=getattr(config, "bridge", None) or ("na0" if default else f"na{tag}"),
                   subnet=getattr(config, "pod_subnet", None) or ("10.244.0.0/24" if default
                                                                  else f"10.240.{int(tag[:2], 16)}.0/24"),
                   conf_dir=getattr(config, "cni_conf_dir", None) or ("/etc/cni/net.d" if default
                                                                    else str(Path(data_dir, "cni", "net.d"))),
                   ipam_dir=getattr(config, "cni_ipam_dir", None) or ("/var/lib/cni/networks" if default
                                                                      else str(Path(data_dir, "cni", "networks"))),
                   daemon_socket=getattr(config, "cni_socket", None) or (
                       DEFAULT_CNI_SOCKET if default else str(Path(data_dir, "cni-plugin.sock"))))

    def conflist(self) -> dict[str, Any]:
        from cni.install import default_conflist

        conf = default_conflist(self.subnet, self.bridge, self.ipam_dir)
        conf["name"] = self.name
        return conf

    def write(self) -> Path:
        """Write our conflist (replacing an older version of ours; other files in the dir are left alone)."""
        from cni.install import CONFLIST_NAME

        os.makedirs(self.conf_dir, exist_ok=True)
        path = Path(self.conf_dir, CONFLIST_NAME)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.conflist(), indent=2) + "\n")
        os.replace(tmp, path)
        return path

    def allocations(self) -> list[str]:
        d = Path(self.ipam_dir, self.name)
        if not d.is_dir():
            return []
        return [p.name for p in d.iterdir() if p.name[0].isdigit() or ":" in p.name]

    def cleanup_if_unused(self) -> bool:
        """Delete the bridge and the allocation dir when no pod holds an address; True when done."""
        if self.allocations():
            log.info("pods still hold addresses on %s: keeping the bridge", self.bridge)
            return False
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            idx = ipr.link_lookup(ifname=self.bridge)
            if idx:
                ipr.link("del", index=idx[0])
        shutil.rmtree(Path(self.ipam_dir, self.name), ignore_errors=True)
        return True


def remove_empty_qos_tree(cgroup_root: str) -> None:
    """Remove `<root>/kubepods/{besteffort,burstable}`, `kubepods` and the root once no pod uses them,
    through the runtime's cgroup driver; a cgroup still holding pods stays (rmdir refuses)."""
    from cri.runtime.cgroups import detect
    from nodeagent.kubelet import resources
    from nodeagent.kubelet.cgroups import remove_cgroup

    driver = detect()
    top = resources.node_allocatable_cgroup(tuple(p for p in cgroup_root.split("/") if p))
    paths = [top.child("besteffort"), top.child("burstable"), top]
    if top.parts[:-1]:
        paths.append(resources.CgroupName(top.parts[:-1]))
    for name in paths:
        try:
            remove_cgroup(driver, name.cgroupfs())
        except OSError as e:
            log.info("cgroup %s kept: %s", name.cgroupfs(), e)
            return


class PluginDaemon:
    """The instance's resident CNI daemon (cni.daemon) on a thread of this process: our bridge plugin's
    exec'd C client hands each call to it (≈13 ms per ADD instead of ≈200 ms for a fresh interpreter)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.server: Any = None
        self.thread: threading.Thread | None = None

    def start(self) -> bool:
        from cni import daemon

        try:
            self.server = daemon.Server(self.path)
        except (RuntimeError, OSError) as e:
            # Another daemon serves this socket (its plugins still get the fast path) or none can bind:
            # the plugins then run in-process, slower but the same.
            log.warning("cni daemon not started on %s: %s", self.path, e)
            return False
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2},
                                       name="cni-daemon", daemon=True)
        self.thread.start()
        log.info("cni daemon listening on %s", self.path)
        return True

    def stop(self) -> None:
        if self.server is None:
            return
        self.server.shutdown()
        if self.thread is not None:
            self.thread.join(5)
        self.server.server_close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self.server = None


async def serve(config: Any, ready: asyncio.Event) -> None:
    """The `cni` component of `nodeagent up`: conflist in place and the plugins' daemon listening before the
    runtime starts; on stop, the daemon stops, and the bridge and the QoS cgroup tree go when no pod is left."""
    from nodeagent.kubelet.agent import KubeletConfig

    net = PodNetwork.from_any(config)
    cgroup_root = KubeletConfig.from_any(config).cgroup_root
    path = await asyncio.to_thread(net.write)
    log.info("pod network %s: bridge %s, subnet %s (%s)", net.name, net.bridge, net.subnet, path)
    plugins = PluginDaemon(net.daemon_socket)
    await asyncio.to_thread(plugins.start)
    ready.set()
    try:
        await asyncio.Event().wait()
    finally:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(plugins.stop)
        with contextlib.suppress(Exception):
            if await asyncio.to_thread(net.cleanup_if_unused):
                await asyncio.to_thread(remove_empty_qos_tree, cgroup_root)

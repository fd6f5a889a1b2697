"""The pod network of one `nodeagent up` / `agent` instance: its CNI conflist, bridge, subnet and IPAM dir,
and the CNI plugins' resident daemon.

Every name comes from the instance's layout (or a flag), so several instances on one host never share a
bridge, a masquerade chain (named after the network) or an allocation directory. The subnet is the
node's `spec.podCIDR`, assigned by the control plane's node IPAM once the kubelet registers the node
(kubelet + a CNI that reads the node's podCIDR, as flannel or kubenet do); `--pod-subnet` overrides it.

The `cni` component (`cni_service`) runs the plugins' daemon before the runtime starts and, when the
instance stops with no pod left on the bridge, removes the bridge and the empty allocation dir. With an
explicit subnet it writes the conflist at once; otherwise the `podcidr` component (`podcidr_service`)
writes it when the Node's podCIDR appears: until then the runtime reports NetworkReady=false and the
node stays NotReady, as with a kubelet whose CNI config is not there yet.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from kernel.fs import atomic_write

log = logging.getLogger("nodeagent.nodenet.network")

IFNAMSIZ = 15  # the longest link name the kernel takes


@dataclasses.dataclass(frozen=True)
class PodNetwork:
    name: str
    bridge: str
    subnet: str | None  # None: adopt the Node's spec.podCIDR (the `podcidr` component)
    conf_dir: str
    ipam_dir: str
    daemon_socket: str = ""  # the instance's `cni-daemon` socket (NODEAGENT_CNI_SOCKET of its plugins)

    def __post_init__(self) -> None:
        if not (self.name and self.conf_dir and self.ipam_dir):
            raise ValueError("pod network: name, CNI conf dir and IPAM dir must be given")
        if not 0 < len(self.bridge) <= IFNAMSIZ:
            raise ValueError(f"pod network bridge {self.bridge!r}: 1 to {IFNAMSIZ} characters")
        if self.subnet is not None:
            try:
                ipaddress.ip_network(self.subnet, strict=False)
            except ValueError as e:
                raise ValueError(f"pod network subnet: {e}") from None

    def conflist(self) -> dict[str, Any]:
        from cni.install import default_conflist

        if not self.subnet:
            raise ValueError(f"pod network {self.name}: no subnet yet (the node's spec.podCIDR is not known)")
        conf = default_conflist(self.subnet, self.bridge, self.ipam_dir)
        conf["name"] = self.name
        return conf

    def write(self) -> Path:
        """Write our conflist (replacing an older version of ours; other files in the dir are left alone)."""
        from cni.install import CONFLIST_NAME

        os.makedirs(self.conf_dir, exist_ok=True)
        path = Path(self.conf_dir, CONFLIST_NAME)
        atomic_write(path, json.dumps(self.conflist(), indent=2) + "\n")
        return path

    def forget_config(self) -> bool:
        """Remove our conflist (only ours); True when there was one."""
        from cni.install import CONFLIST_NAME

        try:
            os.unlink(Path(self.conf_dir, CONFLIST_NAME))
        except FileNotFoundError:
            return False
        return True

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
        from kernel.netlink import IPRoute, delete_link

        with IPRoute() as ipr:
            delete_link(ipr, self.bridge)
        shutil.rmtree(Path(self.ipam_dir, self.name), ignore_errors=True)
        return True


def remove_empty_qos_tree(cgroup_root: str) -> None:
    """Remove `<root>/kubepods/{besteffort,burstable}`, `kubepods` and the root once no pod uses them,
    through the runtime's cgroup driver; a cgroup still holding pods stays (rmdir refuses)."""
    from kernel.cgroups import detect
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

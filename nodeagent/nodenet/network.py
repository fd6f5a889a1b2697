"""The pod network of one `nodeagent up` / `agent` instance: its CNI conflist, bridge, subnet and IPAM dir.

Every name is derived from the data dir (or given), so several instances on one host never share a
bridge, a masquerade chain (named after the network) or an allocation directory. The subnet is the
node's `spec.podCIDR`, assigned by the control plane's node IPAM once the kubelet registers the node
(kubelet + a CNI that reads the node's podCIDR, as flannel or kubenet do); `--pod-subnet` overrides it.

`serve` is the `cni` component: its plugins' daemon listens before the runtime starts and, when the
instance stops with no pod left on the bridge, the bridge and the empty allocation dir go. With an
explicit subnet it writes the conflist at once; otherwise `adopt` (the `podcidr` component) writes it
when the Node's podCIDR appears: until then the runtime reports NetworkReady=false and the node stays
NotReady, as with a kubelet whose CNI config is not there yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("nodeagent.kubelet.network")

DEFAULT_DATA_DIR = "/var/lib/nodeagent"
DEFAULT_CNI_SOCKET = "/run/nodeagent/cni.sock"  # cni.client's default


@dataclasses.dataclass(frozen=True)
class PodNetwork:
    name: str
    bridge: str
    subnet: str | None  # None: adopt the Node's spec.podCIDR (see `adopt`)
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
                   subnet=getattr(config, "pod_subnet", None) or None,
                   conf_dir=getattr(config, "cni_conf_dir", None) or ("/etc/cni/net.d" if default
                                                                    else str(Path(data_dir, "cni", "net.d"))),
                   ipam_dir=getattr(config, "cni_ipam_dir", None) or ("/var/lib/cni/networks" if default
                                                                      else str(Path(data_dir, "cni", "networks"))),
                   daemon_socket=getattr(config, "cni_socket", None) or (
                       DEFAULT_CNI_SOCKET if default else str(Path(data_dir, "cni-plugin.sock"))))

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
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.conflist(), indent=2) + "\n")
        os.replace(tmp, path)
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
    """The `cni` component of `nodeagent up` / `agent`: the plugins' daemon listening (and, with an explicit
    --pod-subnet, the conflist in place) before the runtime starts; on stop, the daemon stops, and the bridge
    and the QoS cgroup tree go when no pod is left."""
    from nodeagent.kubelet.agent import KubeletConfig

    net = PodNetwork.from_any(config)
    cgroup_root = KubeletConfig.from_any(config).cgroup_root
    if net.subnet:
        path = await asyncio.to_thread(net.write)
        log.info("pod network %s: bridge %s, subnet %s from --pod-subnet (%s)", net.name, net.bridge, net.subnet,
                 path)
    elif await asyncio.to_thread(net.forget_config):
        # an earlier run's (or `make install`'s) conflist may name another range: no pod gets an address
        # before the node's own podCIDR is known
        log.info("pod network %s: previous CNI config removed until the node's spec.podCIDR is known", net.name)
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


# -- adopting the Node's podCIDR -------------------------------------------------------------------------

WAIT_LOG_EVERY = 30.0  # seconds between "still waiting for spec.podCIDR" lines


def node_pod_cidr(node: Mapping[str, Any] | None) -> str | None:
    """The node's podCIDR (spec.podCIDR, else the first of spec.podCIDRs) when it is a valid IPv4/IPv6 network."""
    spec = (node or {}).get("spec") or {}
    cidr = spec.get("podCIDR") or next(iter(spec.get("podCIDRs") or []), None)
    if not cidr:
        return None
    try:
        return str(ipaddress.ip_network(cidr, strict=False))
    except ValueError:
        return None


def default_cluster_cidr(data_dir: str) -> str:
    """`up`'s own node IPAM range: 10.244.0.0/16 for the default data dir; any other instance gets a /24 of
    10.240.0.0/16 named by its data dir's tag (as its bridge is), so several `up` clusters on one host do not
    give two bridges the same subnet (each is a one-node cluster; `up --cluster-cidr` widens it)."""
    from nodeagent.kubelet.agent import instance_tag

    if str(data_dir) == DEFAULT_DATA_DIR:
        return "10.244.0.0/16"
    return f"10.240.{int(instance_tag(data_dir)[:2], 16)}.0/24"


class PodCIDRFollower:
    """Follows one Node and writes the pod network's conflist from its spec.podCIDR: first when the node
    IPAM assigns it, again if it ever changes (new pods then get the new range; running pods keep theirs)."""

    def __init__(self, net: PodNetwork, node: str) -> None:
        self.net = net
        self.node = node
        self.subnet: str | None = None
        self.registered = False  # the Node has been seen (with or without a podCIDR)
        self.changed = asyncio.Event()

    async def on_node(self, node: Mapping[str, Any] | None) -> str | None:
        """Adopt the node's podCIDR when it has a new one; returns the subnet in use."""
        self.registered = self.registered or node is not None
        cidr = node_pod_cidr(node)
        if cidr is None or cidr == self.subnet:
            return self.subnet
        if self.subnet is not None:
            log.warning("node %s: spec.podCIDR changed from %s to %s; new pods get addresses from %s",
                        self.node, self.subnet, cidr, cidr)
        self.net = dataclasses.replace(self.net, subnet=cidr)
        path = await asyncio.to_thread(self.net.write)
        self.subnet = cidr
        log.info("pod network %s: bridge %s, subnet %s adopted from node %s's spec.podCIDR (%s)",
                 self.net.name, self.net.bridge, cidr, self.node, path)
        return cidr

    async def run(self, client: Any, ready: asyncio.Event | None = None) -> None:
        from nodeagent.client.informer import Informer

        nodes = Informer(client, "nodes", field_selector=f"metadata.name={self.node}")
        wake = self.changed
        nodes.add_handler(lambda _n: wake.set(), lambda _o, _n: wake.set(), lambda _n: wake.set())
        async with asyncio.TaskGroup() as tg:
            tg.create_task(nodes.run(), name="podcidr-informer")
            if ready is not None:
                ready.set()
            log.info("node %s: waiting for its spec.podCIDR (the control plane's node IPAM assigns it from "
                     "--cluster-cidr once the kubelet registers the node) before writing the CNI config", self.node)
            start = time.monotonic()
            next_log = start + WAIT_LOG_EVERY
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(WAIT_LOG_EVERY):  # not wait_for: it can lose a cancellation on 3.11
                        await wake.wait()
                if wake.is_set():
                    wake.clear()
                    await self.on_node(nodes.get(self.node))
                now = time.monotonic()
                if self.subnet is None and now >= next_log:
                    registered = "registered" if nodes.get(self.node) else "not registered yet"
                    log.info("node %s (%s): still waiting for its spec.podCIDR after %.0fs (is the controller "
                             "manager's node IPAM running, with --allocate-node-cidrs?)", self.node, registered,
                             now - start)
                    next_log = now + WAIT_LOG_EVERY


async def _client_when_reachable(config: Any) -> Any:
    """The node's API client; `up` writes its admin kubeconfig only once its apiserver runs: wait for it."""
    from nodeagent.kubelet.agent import KubeletConfig

    kcfg = KubeletConfig.from_any(config)
    delay = 0.1
    while True:
        try:
            return kcfg.client()
        except (OSError, ValueError, KeyError) as e:
            log.info("pod network: no API credential yet (%s); retrying", e)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def adopt(config: Any, ready: asyncio.Event) -> None:
    """The `podcidr` component: without --pod-subnet, write the CNI config from the Node's spec.podCIDR."""
    from nodeagent.kubelet.agent import KubeletConfig

    net = PodNetwork.from_any(config)
    if net.subnet:
        ready.set()  # an explicit --pod-subnet: the cni component wrote it
        await asyncio.Event().wait()
    client = await _client_when_reachable(config)
    try:
        await PodCIDRFollower(net, KubeletConfig.from_any(config).node_name).run(client, ready)
    finally:
        with contextlib.suppress(Exception):
            await client.close()

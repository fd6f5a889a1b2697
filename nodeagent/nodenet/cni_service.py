"""The `cni` component of `nodeagent up` / `agent`: `serve(config, ready)`.

The CNI plugins' daemon listens (and, with an explicit --pod-subnet, the conflist is in place) before the
runtime starts; on stop, the daemon stops, and the bridge and the QoS cgroup tree go when no pod is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from nodeagent.nodenet.config import CNIConfig
from nodeagent.nodenet.network import PluginDaemon, remove_empty_qos_tree

log = logging.getLogger("nodeagent.nodenet.network")


async def serve(config: CNIConfig, ready: asyncio.Event) -> None:
    net = config.network
    if net.subnet:
        path = await asyncio.to_thread(net.write)
        log.info("pod network %s: bridge %s, subnet %s from --pod-subnet (%s)", net.name,
                 net.bridge, net.subnet, path)
    elif await asyncio.to_thread(net.forget_config):
        # an earlier run's (or `make install`'s) conflist may name another range: no pod gets an address
        # before the node's own podCIDR is known
        log.info("pod network %s: previous CNI config removed until the node's spec.podCIDR is "
                 "known", net.name)
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
                await asyncio.to_thread(remove_empty_qos_tree, config.cgroup_root)

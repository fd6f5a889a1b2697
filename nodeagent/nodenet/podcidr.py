"""Adopting the Node's spec.podCIDR: the pod network's CNI config follows the podCIDR the control plane's
node IPAM assigns (kubelet + a CNI that reads the node's podCIDR, as flannel or kubenet do)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import time
from collections.abc import Mapping
from typing import Any

from nodeagent.nodenet.network import PodNetwork

log = logging.getLogger("nodeagent.nodenet.podcidr")

WAIT_LOG_EVERY = 30.0  # seconds between "still waiting for spec.podCIDR" lines


def node_pod_cidr(node: Mapping[str, Any] | None) -> str | None:
    """The node's podCIDR (spec.podCIDR, else the first of spec.podCIDRs) when it is a valid IPv4/IPv6
    network."""
    spec = (node or {}).get("spec") or {}
    cidr = spec.get("podCIDR") or next(iter(spec.get("podCIDRs") or []), None)
    if not cidr:
        return None
    try:
        return str(ipaddress.ip_network(cidr, strict=False))
    except ValueError:
        return None


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
                     "--cluster-cidr once the kubelet registers the node) before writing the CNI "
                     "config", self.node)
            start = time.monotonic()
            next_log = start + WAIT_LOG_EVERY
            while True:
                with contextlib.suppress(TimeoutError):
                    # not wait_for: it can lose a cancellation on 3.11
                    async with asyncio.timeout(WAIT_LOG_EVERY):
                        await wake.wait()
                if wake.is_set():
                    wake.clear()
                    await self.on_node(nodes.get(self.node))
                now = time.monotonic()
                if self.subnet is None and now >= next_log:
                    registered = "registered" if nodes.get(self.node) else "not registered yet"
                    log.info("node %s (%s): still waiting for its spec.podCIDR after %.0fs (is "
                             "the controller manager's node IPAM running, with --allocate-node-cidrs?)",
                             self.node, registered, now - start)
                    next_log = now + WAIT_LOG_EVERY

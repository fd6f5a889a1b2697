"""Server side: stamp every Node with the cluster's pod network backend and cluster CIDR.

`nodeagent server --pod-network MODE` (and `up`) run this as the `podnetwork` component
(`podnetwork_service`); agents read the mode from their own Node, so one flag on the server decides the
whole cluster's backend.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nodeagent.client.informer import shared
from nodeagent.client.rest import Client, ClientError
from nodeagent.nodenet import annotations as ann
from nodeagent.nodenet import bgppeer
from nodeagent.nodenet.config import BGPSettings

log = logging.getLogger("nodeagent.nodenet.controller")

class ModeSwitchRefused(SystemExit):
    """The cluster's nodes already run another pod network: the server refuses to start."""


def wanted(mode: str, cluster_cidr: str, bgp: BGPSettings | None = None) -> dict[str, str | None]:
    """The annotations the server stamps on every Node (None: removed)."""
    out: dict[str, str | None] = {ann.BACKEND: mode, ann.CLUSTER_CIDR: cluster_cidr, ann.BGP_AS: None,
                                  ann.BGP_ROUTE_REFLECTORS: None, ann.BGP_SERVICE_CIDRS: None}
    if mode == "bgp":
        b = bgp or BGPSettings()
        out.update({ann.BGP_AS: str(b.asn), ann.BGP_ROUTE_REFLECTORS: ",".join(b.route_reflectors) or None,
                    ann.BGP_SERVICE_CIDRS: ",".join(b.service_cidrs) or None})
    return out


def needed_patch(node: dict[str, Any], mode: str, cluster_cidr: str,
                 bgp: BGPSettings | None = None) -> dict[str, Any] | None:
    a = (node.get("metadata") or {}).get("annotations") or {}
    change = {k: v for k, v in wanted(mode, cluster_cidr, bgp).items() if a.get(k) != v}
    return {"metadata": {"annotations": change}} if change else None


def check_no_switch(nodes: list[dict[str, Any]], mode: str) -> None:
    """Refuse a --pod-network other than the one the cluster's nodes run: routes, tunnels and BGP
    sessions are not migrated under running pods (as flannel's and Calico's backends are chosen once)."""
    running: dict[str, list[str]] = {}
    for n in nodes:
        other = ((n.get("metadata") or {}).get("annotations") or {}).get(ann.BACKEND)
        if other and other != mode:
            running.setdefault(other, []).append(n["metadata"]["name"])
    if running:
        which = "; ".join(f"{m} on {', '.join(sorted(names))}" for m, names in sorted(running.items()))
        raise ModeSwitchRefused(
            f"nodeagent server: --pod-network {mode} refused: this cluster's nodes run another pod network "
            f"({which}). Switching a running cluster's pod network is not supported: start the server with "
            f"that --pod-network, or remove the nodes (kubectl delete node) and rejoin them.")


async def run(client: Client, mode: str, cluster_cidr: str, ready: asyncio.Event | None = None,
              bgp: BGPSettings | None = None) -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    nodes = shared(client, "nodes")  # the process's (in `up`, the controller manager's too)
    nodes.add_handler(lambda n: queue.put_nowait(n["metadata"]["name"]),
                      lambda _o, n: queue.put_nowait(n["metadata"]["name"]))
    synced = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(nodes.run(synced))
        await synced.wait()
        check_no_switch(nodes.list(), mode)
        if mode == "bgp":
            try:
                made = await bgppeer.install(client)
            except ClientError as e:
                log.error("bgp: cannot install the BGPPeer definition (%s); external peers are not served", e)
            else:
                if made:
                    log.info("bgp: installed %s", ", ".join(made))
        if ready is not None:
            ready.set()
        while True:
            name = await queue.get()
            node = nodes.get(name)
            patch = None if node is None else needed_patch(node, mode, cluster_cidr, bgp)
            if patch is None:
                continue
            try:
                await client.patch("nodes", name, patch)
                log.info("node %s: pod network %s, cluster CIDR %s", name, mode, cluster_cidr)
            except ClientError as e:
                if not e.not_found:
                    log.warning("node %s: cannot set its pod network: %s", name, e)
                    await asyncio.sleep(1)
                    queue.put_nowait(name)

"""Server side: stamp every Node with the cluster's pod network backend and cluster CIDR.

`nodeagent server --pod-network MODE` (and `up`) run this as the `podnetwork` component; agents read the
mode from their own Node, so one flag on the server decides the whole cluster's backend.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from nodeagent.client.informer import Informer
from nodeagent.client.rest import Client, ClientError
from nodeagent.nodenet import annotations as ann

log = logging.getLogger("nodeagent.nodenet.controller")

DEFAULT_MODE = "host-gw"
DEFAULT_CLUSTER_CIDR = "10.244.0.0/16"


def settings(config: Any) -> tuple[str, str]:
    """(mode, cluster CIDR) from a server/up config."""
    mode = getattr(config, "pod_network", None) or DEFAULT_MODE
    opts = getattr(config, "controller_options", None)
    cidr = getattr(opts, "cluster_cidr", None) or getattr(config, "cluster_cidr", None) or DEFAULT_CLUSTER_CIDR
    return mode, cidr


def needed_patch(node: dict[str, Any], mode: str, cluster_cidr: str) -> dict[str, Any] | None:
    a = (node.get("metadata") or {}).get("annotations") or {}
    if a.get(ann.BACKEND) == mode and a.get(ann.CLUSTER_CIDR) == cluster_cidr:
        return None
    return {"metadata": {"annotations": {ann.BACKEND: mode, ann.CLUSTER_CIDR: cluster_cidr}}}


async def run(client: Client, mode: str, cluster_cidr: str, ready: asyncio.Event | None = None) -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    nodes = Informer(client, "nodes")
    nodes.add_handler(lambda n: queue.put_nowait(n["metadata"]["name"]),
                      lambda _o, n: queue.put_nowait(n["metadata"]["name"]))
    async with asyncio.TaskGroup() as tg:
        tg.create_task(nodes.run(ready))
        while True:
            name = await queue.get()
            node = nodes.get(name)
            patch = None if node is None else needed_patch(node, mode, cluster_cidr)
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


async def serve(config: Any, ready: asyncio.Event) -> None:
    """The `podnetwork` component of `nodeagent server` / `up`."""
    mode, cidr = settings(config)
    if mode not in ann.MODES:
        raise ValueError(f"--pod-network {mode!r}: one of {', '.join(ann.MODES)}")
    client = Client.from_kubeconfig(Path(getattr(config, "data_dir", "/var/lib/nodeagent"), "admin.kubeconfig"))
    try:
        await run(client, mode, cidr, ready)
    finally:
        await client.close()

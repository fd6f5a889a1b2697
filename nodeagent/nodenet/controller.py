"""Server side: stamp every Node with the cluster's pod network backend and cluster CIDR.

`nodeagent server --pod-network MODE` (and `up`) run this as the `podnetwork` component
(`podnetwork_service`); agents read the mode from their own Node, so one flag on the server decides the
whole cluster's backend.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nodeagent.client.informer import Informer
from nodeagent.client.rest import Client, ClientError
from nodeagent.nodenet import annotations as ann

log = logging.getLogger("nodeagent.nodenet.controller")

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

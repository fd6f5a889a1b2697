"""The `nodenet` component of `nodeagent agent` / `up`: `serve(config, ready)` keeps the routes to the
other nodes' pods (`agent.NodeNet`).

Everything is imported when the module loads (in the main thread, before the runtime forks containers):
an import inside a worker thread racing a fork can deadlock on logging's and the import lock.
"""

from __future__ import annotations

import asyncio
import logging

from nodeagent.nodenet.agent import NodeNet, public_ip_for
from nodeagent.nodenet.config import NodeNetConfig

log = logging.getLogger("nodeagent.nodenet")


async def serve(config: NodeNetConfig, ready: asyncio.Event) -> None:
    client = config.credentials.client()
    public_ip = config.node_ip or public_ip_for(client.server)
    net = NodeNet(client, config.node_name, config.pod_subnet, public_ip, config.bird_dir)
    log.info("node %s: underlay address %s (%s)", config.node_name, public_ip,
             "--node-ip" if config.node_ip else f"the route towards {client.server}")
    try:
        await net.run(ready)
    finally:
        await client.close()

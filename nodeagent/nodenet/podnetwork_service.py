"""The `podnetwork` component of `nodeagent server` / `up`: `serve(config, ready)` stamps every Node with
the cluster's pod network backend and cluster CIDR (`controller.run`)."""

from __future__ import annotations

import asyncio

from nodeagent.client.rest import Client
from nodeagent.nodenet import controller
from nodeagent.nodenet.config import PodNetworkConfig


async def serve(config: PodNetworkConfig, ready: asyncio.Event) -> None:
    client = Client.from_kubeconfig(config.kubeconfig)
    try:
        await controller.run(client, config.backend, config.cluster_cidr, ready, config.bgp)
    finally:
        await client.close()

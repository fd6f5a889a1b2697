"""The `podcidr` component of `nodeagent up` / `agent`: without --pod-subnet, write the CNI config from
the Node's spec.podCIDR (`podcidr.PodCIDRFollower`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from nodeagent.client.config import Credentials
from nodeagent.client.rest import Client
from nodeagent.nodenet.config import PodCIDRConfig
from nodeagent.nodenet.podcidr import PodCIDRFollower

log = logging.getLogger("nodeagent.nodenet.podcidr")


async def _client_when_reachable(credentials: Credentials) -> Client:
    """The node's API client; `up` writes its admin kubeconfig only once its apiserver runs: wait for it."""
    delay = 0.1
    while True:
        try:
            return credentials.client()
        except (OSError, ValueError, KeyError) as e:
            log.info("pod network: no API credential yet (%s); retrying", e)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def serve(config: PodCIDRConfig, ready: asyncio.Event) -> None:
    if config.network.subnet:
        ready.set()  # an explicit --pod-subnet: the cni component wrote it
        await asyncio.Event().wait()
    client = await _client_when_reachable(config.credentials)
    try:
        await PodCIDRFollower(config.network, config.node_name).run(client, ready)
    finally:
        with contextlib.suppress(Exception):
            await client.close()

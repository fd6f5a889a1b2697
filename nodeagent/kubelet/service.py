"""The `kubelet` component of `nodeagent up` / `agent`: `serve(config, ready)`."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from cri.client import RuntimeClient
from nodeagent.kubelet.agent import Kubelet
from nodeagent.kubelet.config import KubeletConfig

log = logging.getLogger("nodeagent.kubelet")


async def serve(config: KubeletConfig, ready: asyncio.Event) -> None:
    client = config.client()
    events = config.event_client()
    snapshots = config.snapshot_client()
    cri = RuntimeClient(config.runtime_endpoint)
    log.info("CRI runtime at %s: %s", config.runtime_endpoint,
             "in this process (unary calls direct, events over gRPC)" if cri.in_process else "over gRPC")
    try:
        await Kubelet(config, client, cri, events_client=events, snapshot_client=snapshots).run(ready)
    finally:
        with contextlib.suppress(Exception):
            await cri.close()
        for c in (client, events, *([snapshots] if snapshots else [])):
            with contextlib.suppress(Exception):
                await c.close()

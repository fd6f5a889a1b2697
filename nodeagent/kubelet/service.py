"""The `kubelet` component of `nodeagent up` / `agent`: `serve(config, ready)`."""

from __future__ import annotations

import asyncio
import contextlib

from cri.client import RuntimeClient
from nodeagent.kubelet.agent import Kubelet
from nodeagent.kubelet.config import KubeletConfig


async def serve(config: KubeletConfig, ready: asyncio.Event) -> None:
    client = config.client()
    events = config.event_client()
    snapshots = config.snapshot_client()
    cri = RuntimeClient(config.runtime_endpoint)
    try:
        await Kubelet(config, client, cri, events_client=events, snapshot_client=snapshots).run(ready)
    finally:
        with contextlib.suppress(Exception):
            await cri.close()
        for c in (client, events, *([snapshots] if snapshots else [])):
            with contextlib.suppress(Exception):
                await c.close()

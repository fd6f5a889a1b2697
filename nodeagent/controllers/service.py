"""The `controllers` component of `nodeagent server` / `up`: the controller manager under leader election."""

from __future__ import annotations

import asyncio
import logging
import socket

from nodeagent.client.leader import LeaderElector
from nodeagent.client.rest import Client
from nodeagent.controllers.config import ControllerManagerConfig
from nodeagent.controllers.manager import run_controllers, select

log = logging.getLogger("nodeagent.controllers")


async def serve(config: ControllerManagerConfig, ready: asyncio.Event) -> None:
    chosen = select(config.controllers)
    if not chosen:
        log.info("no controllers enabled")
        ready.set()
        return
    client = Client.from_kubeconfig(config.kubeconfig)
    try:
        elector = LeaderElector(client, "nodeagent-controller-manager", f"{socket.gethostname()}-{id(client):x}")
        ready.set()
        await elector.run(lambda: run_controllers(client, controllers=chosen, options=config.options))
    finally:
        await client.close()

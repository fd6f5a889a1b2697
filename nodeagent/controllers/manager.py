"""The controller manager: every controller over one set of shared informers, under leader election.

Started by `nodeagent server` / `up` after the apiserver is ready (it reads the
admin kubeconfig the apiserver writes under the data dir). With several servers
only the holder of the `nodeagent-controller-manager` Lease runs controllers.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import Any

from nodeagent.client.events import EventRecorder
from nodeagent.client.informer import SharedInformers
from nodeagent.client.leader import LeaderElector
from nodeagent.client.rest import Client
from nodeagent.controllers.base import Controller
from nodeagent.controllers.deployment_controller import DeploymentController
from nodeagent.controllers.endpoints_controller import EndpointsController
from nodeagent.controllers.gc_controller import GarbageCollector
from nodeagent.controllers.replicaset_controller import ReplicaSetController

log = logging.getLogger("nodeagent.controllers")

CONTROLLERS = (ReplicaSetController, DeploymentController, GarbageCollector, EndpointsController)


async def run_controllers(client: Client, ready: asyncio.Event | None = None,
                          controllers: tuple[type[Controller], ...] = CONTROLLERS) -> None:
    """All controllers until cancelled (no leader election: tests and single servers)."""
    informers = SharedInformers(client)
    recorder = EventRecorder(client, "controller-manager", socket.gethostname())
    instances = [cls(client, informers, recorder) for cls in controllers]
    async with asyncio.TaskGroup() as tg:
        tg.create_task(recorder.run(), name="events")
        await informers.run(tg)
        for c in instances:
            tg.create_task(c.run(), name=c.name)
        log.info("controllers running: %s", ", ".join(c.name for c in instances))
        if ready is not None:
            ready.set()


async def serve(config: Any, ready: asyncio.Event) -> None:
    """The `nodeagent up/server` component."""
    kubeconfig = Path(getattr(config, "data_dir", "/var/lib/nodeagent")) / "admin.kubeconfig"
    client = Client.from_kubeconfig(kubeconfig)
    try:
        elector = LeaderElector(client, "nodeagent-controller-manager", f"{socket.gethostname()}-{id(client):x}")
        ready.set()
        await elector.run(lambda: run_controllers(client))
    finally:
        await client.close()

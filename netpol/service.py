"""`serve(config, ready)`: NetworkPolicy enforcement as a `nodeagent up` / `agent` component.

Policies, pods and namespaces come from the API with the config's credentials; the kernel objects carry
the names the config gives (the instance's layout tags them for any data dir but the default, so several
clusters on one host do not share chains). On stop the rules are removed: a node agent that is not
running enforces nothing stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from kernel.netns import NetnsWorker
from netpol.config import NetpolConfig
from netpol.enforcer import Backend, Enforcer, make_backend

log = logging.getLogger("netpol")


def backend_for(config: NetpolConfig) -> Backend:
    if config.mode == "iptables":
        return make_backend(config.mode, chain_prefix=config.chain_prefix, set_prefix=config.set_prefix)
    return make_backend(config.mode, table=config.table)


async def serve(config: NetpolConfig, ready: asyncio.Event) -> None:
    from netpol import api_source
    from nodeagent.client.informer import SharedInformers

    if config.credentials is None:
        raise ValueError("netpol: no API credentials")
    worker = NetnsWorker(config.netns)
    enforcer = Enforcer(backend_for(config), worker, node_name=config.node_name,
                        min_interval=config.min_sync_period, max_interval=config.sync_period,
                        sources=len(api_source.RESOURCES))
    client = config.credentials.client()
    informers = SharedInformers(client, share=True)  # `up`'s DNS, netproxy, kubelet read the same caches
    api_source.wire(informers, enforcer)
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(api_source.run(informers, enforcer), name="netpol-informers")
            tg.create_task(enforcer.run(), name="netpol-sync")
            await enforcer.synced.wait()
            log.info("netpol: %s mode synced for node %s", config.mode, config.node_name)
            ready.set()
    finally:
        informers.release()
        with contextlib.suppress(Exception):
            await asyncio.shield(enforcer.cleanup())
        await asyncio.to_thread(worker.close)  # waits for a kernel call in flight, off the event loop
        await client.close()

"""`serve(config, ready)`: NetworkPolicy enforcement as a `nodeagent up` / `agent` component.

Config attributes read (all optional, so `UpConfig` works unchanged): `data_dir`, `node_name`,
`server` + `token` (agent) or `kubeconfig` (default: <data_dir>/admin.kubeconfig, as the kubelet),
`netpol_mode` (else `proxy_mode`, else iptables), `netpol_netns`. Kernel object names carry the data
dir's instance tag unless it is the default one, so several clusters on one host do not share chains.
On stop the rules are removed: a node agent that is not running enforces nothing stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

from netpol.enforcer import Backend, Enforcer, make_backend
from netproxy.netns import NetnsWorker

log = logging.getLogger("netpol")

DEFAULT_DATA_DIR = "/var/lib/nodeagent"


def backend_for(mode: str, data_dir: str | None) -> Backend:
    """Default names for the default data dir; tagged names (NA<tag>-NP-*, nodeagent-netpol-<tag>) else."""
    if not data_dir or data_dir == DEFAULT_DATA_DIR:
        return make_backend(mode)
    from nodeagent.kubelet.agent import instance_tag

    tag = instance_tag(data_dir)
    if mode == "iptables":
        return make_backend(mode, chain_prefix=f"NA{tag}-NP", set_prefix=f"NA{tag}-")
    return make_backend(mode, table=f"nodeagent-netpol-{tag}")


def client_for(config: Any) -> Any:
    from nodeagent.client.config import node_client

    return node_client(config)


async def serve(config: Any, ready: asyncio.Event) -> None:
    from netpol import api_source
    from nodeagent.client.informer import SharedInformers

    mode = getattr(config, "netpol_mode", None) or getattr(config, "proxy_mode", None) or "iptables"
    if mode not in ("iptables", "nftables"):
        mode = "iptables"
    node = (getattr(config, "node_name", None) or socket.gethostname()).lower()
    worker = NetnsWorker(getattr(config, "netpol_netns", None))
    enforcer = Enforcer(backend_for(mode, getattr(config, "data_dir", None)), worker, node_name=node,
                        min_interval=1.0, max_interval=60.0, sources=len(api_source.RESOURCES))
    client = client_for(config)
    informers = SharedInformers(client)
    api_source.wire(informers, enforcer)
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(api_source.run(informers, enforcer), name="netpol-informers")
            tg.create_task(enforcer.run(), name="netpol-sync")
            await enforcer.synced.wait()
            log.info("netpol: %s mode synced for node %s", mode, node)
            ready.set()
    finally:
        with contextlib.suppress(Exception):
            await asyncio.shield(enforcer.cleanup())
        await asyncio.to_thread(worker.close)  # waits for a kernel call in flight, off the event loop
        await client.close()

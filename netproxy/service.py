"""`serve(config, ready)`: netproxy as a `nodeagent up` component, over a pluggable source.

The rule engine (`proxy.Proxy` + a backend) takes Services and endpoints from a
`Source`. Until the apiserver's informers exist, the only sources are in-memory
(`StaticSource`) — the lead wires an informer-backed source here later: it calls
the proxy's handlers from watch events and `set_*_synced()` after the first list.

Config attributes read (all optional, so `UpConfig` works unchanged):
`node_name`, `proxy_mode` (iptables | nftables | ipvs), `proxy_netns`,
`cluster_cidr`, `node_ips`, `proxy_sync_period` (full resync, s),
`proxy_min_sync_period` (s), `proxy_rule_counters` (iptables mode), `ipvs_scheduler` and
`ipvs_strict_arp` (ipvs mode), `netproxy_source` (a Source; default: Services and EndpointSlices from
the API with the node's credential, nodeagent.client.config.node_client), `proxy_cleanup_on_stop`
(remove the rules on stop: for throwaway instances; kube-proxy keeps them across restarts).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from netproxy.backends import make_proxier
from netproxy.iptables.libiptc import load_iptc
from netproxy.netns import NetnsWorker
from netproxy.proxier import NodeConfig
from netproxy.proxy import Proxy

log = logging.getLogger("netproxy")

# python-iptables is imported here, when `up`/`agent` load their components on the main thread before any
# task runs, not first in a sync thread while the runtime forks a container (see load_iptc).
with contextlib.suppress(ImportError):
    load_iptc()


class Source(Protocol):
    """Feeds a Proxy: list everything, call `proxy.set_services_synced()` / `set_endpoints_synced()`,
    then keep calling `on_service(prev, cur)` / `on_endpoint_slice(obj, removed)` until cancelled."""

    async def run(self, proxy: Proxy) -> None: ...


class StaticSource:
    """A fixed set of Service and EndpointSlice dicts (tests, benchmarks, `--from-file`)."""

    def __init__(self, services: Iterable[Mapping[str, Any]] = (),
                 slices: Iterable[Mapping[str, Any]] = ()) -> None:
        self.services, self.slices = list(services), list(slices)

    async def run(self, proxy: Proxy) -> None:
        for s in self.services:
            proxy.on_service(None, s)
        proxy.set_services_synced()
        for s in self.slices:
            proxy.on_endpoint_slice(s)
        proxy.set_endpoints_synced()
        await asyncio.Event().wait()


def node_config(config: Any) -> NodeConfig:
    return NodeConfig(
        node_name=getattr(config, "node_name", None) or socket.gethostname(),
        node_ips=tuple(getattr(config, "node_ips", None) or ()),
        cluster_cidr=getattr(config, "cluster_cidr", None),
    )


def proxier_options(mode: str, config: Any) -> dict[str, str]:
    """Backend options from the node's flags (`--proxy-rule-counters`, `--ipvs-scheduler`, `--ipvs-strict-arp`)."""
    if mode == "iptables" and getattr(config, "proxy_rule_counters", False):
        return {"counters": "true"}
    if mode == "ipvs":
        return {"scheduler": getattr(config, "ipvs_scheduler", None) or "rr",
                "strict_arp": "true" if getattr(config, "ipvs_strict_arp", False) else "false"}
    return {}


async def serve(config: Any, ready: asyncio.Event) -> None:
    source: Source | None = getattr(config, "netproxy_source", None)
    client = None
    if source is None:
        from netproxy.api_source import ApiSource
        from nodeagent.client.config import node_client

        client = node_client(config)
        source = ApiSource(client)
    mode = getattr(config, "proxy_mode", None) or "iptables"
    worker = NetnsWorker(getattr(config, "proxy_netns", None))
    proxy = Proxy(make_proxier(mode, node_config(config), **proxier_options(mode, config)), worker,
                  min_interval=float(getattr(config, "proxy_min_sync_period", 1.0) or 0.0),
                  max_interval=float(getattr(config, "proxy_sync_period", 30.0) or 30.0))
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(source.run(proxy), name="netproxy-source")
            tg.create_task(proxy.run(), name="netproxy-sync")
            await proxy.synced.wait()
            log.info("netproxy: %s mode synced (%s)", mode, proxy.stats.last)
            ready.set()
    finally:
        if getattr(config, "proxy_cleanup_on_stop", False):
            try:
                await asyncio.shield(proxy.cleanup())
            except Exception:
                log.exception("netproxy: removing the %s rules on stop failed", mode)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(worker.close)  # waits for a kernel call in flight, off the event loop
        if client is not None:
            await client.close()

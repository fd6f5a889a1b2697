"""`serve(config, ready)`: netproxy as a `nodeagent up` / `agent` component, over a pluggable source.

The rule engine (`proxy.Proxy` + a backend) takes Services and endpoints from a `Source`: by default
Services and EndpointSlices from the API with the config's credentials (`ApiSource`); tests, benchmarks
and `nodeagent proxy --from-file` hand in a `StaticSource`. With `cleanup_on_stop` (throwaway
instances) the rules are removed on stop; kube-proxy keeps them across restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from kernel import iptables
from kernel.netns import NetnsWorker
from netproxy.backends import make_proxier
from netproxy.config import ProxyConfig
from netproxy.healthcheck import ServiceHealthServer
from netproxy.iptables.libiptc import load_iptc
from netproxy.proxier import NodeConfig
from netproxy.proxy import Proxy

log = logging.getLogger("netproxy")

# python-iptables is imported here, when `up`/`agent` load their components on the main thread before any
# task runs, not first in a sync thread while the runtime forks a container (see load_iptc); only on a
# legacy (x_tables) host, the one backend that writes with it: elsewhere it would be 2.4 MiB of RSS unused
if iptables.backend() == "legacy":
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


def node_config(config: ProxyConfig) -> NodeConfig:
    return NodeConfig(node_name=config.node_name, node_ips=config.node_ips, cluster_cidr=config.cluster_cidr)


def proxier_options(config: ProxyConfig) -> dict[str, str]:
    """Backend options from the node's flags (`--proxy-rule-counters`, `--ipvs-scheduler`,
    `--ipvs-strict-arp`)."""
    if config.mode == "iptables" and config.rule_counters:
        return {"counters": "true"}
    if config.mode == "ipvs":
        return {"scheduler": config.ipvs_scheduler,
                "strict_arp": "true" if config.ipvs_strict_arp else "false"}
    return {}


def make_proxy(config: ProxyConfig, worker: NetnsWorker) -> Proxy:
    return Proxy(make_proxier(config.mode, node_config(config), **proxier_options(config)), worker,
                 min_interval=config.min_sync_period, max_interval=config.sync_period)


async def serve(config: ProxyConfig, ready: asyncio.Event, source: Source | None = None) -> None:
    client = None
    if source is None:
        from netproxy.api_source import ApiSource

        if config.credentials is None:
            raise ValueError("netproxy: no Service source (credentials or a source)")
        client = config.credentials.client()
        source = ApiSource(client)
    mode = config.mode
    worker = NetnsWorker(config.netns)
    proxy = make_proxy(config, worker)
    try:
        async with asyncio.TaskGroup() as tg:
            if config.netns is None:  # the health check ports listen in this process's network namespace
                health = ServiceHealthServer(config.node_name, config.node_ips, lambda: proxy.healthy)
                proxy.on_synced.append(health.update)
                tg.create_task(health.run(), name="netproxy-healthcheck")
            tg.create_task(source.run(proxy), name="netproxy-source")
            tg.create_task(proxy.run(), name="netproxy-sync")
            await proxy.synced.wait()
            log.info("netproxy: %s mode synced (%s)", mode, proxy.stats.last)
            ready.set()
    finally:
        if config.cleanup_on_stop:
            try:
                await asyncio.shield(proxy.cleanup())
            except Exception:
                log.exception("netproxy: removing the %s rules on stop failed", mode)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(worker.close)  # waits for a kernel call in flight, off the event loop
        if client is not None:
            await client.close()

"""`serve(config, ready)`: netproxy as a `nodeagent up` component, over a pluggable source.

The rule engine (`proxy.Proxy` + a backend) takes Services and endpoints from a
`Source`. Until the apiserver's informers exist, the only sources are in-memory
(`StaticSource`) — the lead wires an informer-backed source here later: it calls
the proxy's handlers from watch events and `set_*_synced()` after the first list.

Config attributes read (all optional, so `UpConfig` works unchanged):
`node_name`, `proxy_mode` (iptables | nftables | ipvs), `proxy_netns`,
`cluster_cidr`, `node_ips`, `proxy_sync_period` (full resync, s),
`proxy_min_sync_period` (s), `netproxy_source` (a Source).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from netproxy.backends import make_proxier
from netproxy.netns import NetnsWorker
from netproxy.proxier import NodeConfig
from netproxy.proxy import Proxy

log = logging.getLogger("netproxy")


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


async def serve(config: Any, ready: asyncio.Event) -> None:
    source: Source | None = getattr(config, "netproxy_source", None)
    client = None
    if source is None and getattr(config, "kubeconfig", None):
        from netproxy.api_source import ApiSource
        from nodeagent.client.rest import Client

        client = Client.from_kubeconfig(config.kubeconfig)
        source = ApiSource(client)
    elif source is None and getattr(config, "server", None):  # `nodeagent agent --server URL --token T`
        from netproxy.api_source import ApiSource
        from nodeagent.kubelet.agent import KubeletConfig

        client = KubeletConfig.from_any(config).client()
        source = ApiSource(client)
    if source is None:
        log.warning("netproxy: no Service source configured (set kubeconfig); writing no rules")
        ready.set()
        await asyncio.Event().wait()
        return
    mode = getattr(config, "proxy_mode", None) or "iptables"
    if mode == "iptables":
        # libiptc's module imports (python-iptables pulls in setuptools, which logs at import) must not
        # first happen in a sync thread while the runtime forks a container in another: os.fork takes
        # logging's lock, then the import lock, so the two threads would deadlock the agent.
        with contextlib.suppress(ImportError):
            import iptc  # noqa: F401
    worker = NetnsWorker(getattr(config, "proxy_netns", None))
    proxy = Proxy(make_proxier(mode, node_config(config)), worker,
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
        with contextlib.suppress(Exception):
            worker.close()
        if client is not None:
            await client.close()

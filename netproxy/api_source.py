"""The informer-backed Source: Services and EndpointSlices from the apiserver feed the proxy.

Handlers only record into the proxy's change trackers (which drop no-ops); the
proxy's single writer syncs. The proxy is told it is synced only after both
lists have been delivered, so no partial ruleset is ever written.
"""

from __future__ import annotations

import asyncio

from netproxy.proxy import Proxy
from nodeagent.client.informer import shared
from nodeagent.client.rest import Client


class ApiSource:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def run(self, proxy: Proxy) -> None:
        # the process's informers: in `up`, DNS and the kubelet read the same Services and slices
        services = shared(self.client, "services")
        slices = shared(self.client, "endpointslices")
        removers = [
            services.add_handler(lambda o: proxy.on_service(None, o), proxy.on_service,
                                 lambda o: proxy.on_service(o, None)),
            slices.add_handler(proxy.on_endpoint_slice, lambda old, new: proxy.on_endpoint_slice(new),
                               lambda o: proxy.on_endpoint_slice(o, removed=True))]
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(services.run(client=self.client), name="netproxy-services")
                tg.create_task(slices.run(client=self.client), name="netproxy-endpointslices")
                await services.wait_synced()
                proxy.set_services_synced()
                await slices.wait_synced()
                proxy.set_endpoints_synced()
        finally:
            for remove in removers:
                remove()

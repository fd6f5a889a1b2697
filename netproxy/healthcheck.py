"""kube-proxy's service health server: for each LoadBalancer Service with `externalTrafficPolicy: Local`, an
HTTP server on its `healthCheckNodePort` answering any path with the node's count of local ready endpoints,
so an external load balancer (or a person with curl) sends traffic only to nodes that can serve it.

The body and codes are kube-proxy's (pkg/proxy/healthcheck/service_health.go): 200 when the count is not
zero and the proxy is healthy (synced, its last sync did not fail), else 503, with the JSON below.
`update` is called after every sync with the applied state; the listeners follow it (opened for new ports,
closed for gone ones); a port that cannot be bound is logged with its reason and retried at the next
update.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from aiohttp import web

from netproxy.tracker import ProxyState

log = logging.getLogger("netproxy.healthcheck")

Name = tuple[str, str]  # (namespace, name)


def body(name: Name, count: int, healthy: bool = True) -> str:
    """kube-proxy's body, byte for byte (tab-indented, no trailing newline)."""
    return ("{\n"
            "\t\"service\": {\n"
            f"\t\t\"namespace\": \"{name[0]}\",\n"
            f"\t\t\"name\": \"{name[1]}\"\n"
            "\t},\n"
            f"\t\"localEndpoints\": {count},\n"
            f"\t\"serviceProxyHealthy\": {'true' if healthy else 'false'}\n"
            "}")


def desired(state: ProxyState, node_name: str | None) -> tuple[dict[Name, int], dict[Name, int]]:
    """({service: health check port}, {service: local ready endpoints}) from the applied state."""
    ports: dict[Name, int] = {}
    counts: dict[Name, int] = {}
    for spn, sp in state.services.items():
        if not sp.health_check_node_port:
            continue
        name = (spn.namespace, spn.name)
        ports[name] = sp.health_check_node_port
        local = {e.ip for e in state.endpoints.get(spn, ()) if e.ready and e.is_local(node_name)}
        counts[name] = max(counts.get(name, 0), len(local))
    return ports, counts


class ServiceHealthServer:
    def __init__(self, node_name: str | None, addresses: Iterable[str] = (),
                 healthy: Callable[[], bool] = lambda: True) -> None:
        self.node_name = node_name
        self.healthy = healthy  # serviceProxyHealthy: the proxy's own health
        self.addresses = tuple(addresses) or ("0.0.0.0",)
        self.counts: dict[Name, int] = {}
        self._want: dict[Name, int] = {}
        self._open: dict[Name, tuple[int, list[web.TCPSite], web.ServerRunner]] = {}
        self._changed = asyncio.Event()

    def update(self, state: ProxyState) -> None:
        """After a sync: the Services and counts to serve (the listeners follow in `run`)."""
        self._want, self.counts = desired(state, self.node_name)
        self._changed.set()

    async def run(self) -> None:
        try:
            while True:
                await self._changed.wait()
                self._changed.clear()
                try:
                    await self._reconcile()
                except Exception:  # never take the proxy down for a health check port
                    log.exception("health check listeners; retried at the next sync")
        finally:
            for name in list(self._open):
                await self._close(name)

    async def _reconcile(self) -> None:
        for name, (port, _sites, _runner) in list(self._open.items()):
            if self._want.get(name) != port:
                await self._close(name)
        for name, port in self._want.items():
            if name not in self._open:
                await self._listen(name, port)

    async def _listen(self, name: Name, port: int) -> None:
        async def handle(request: web.BaseRequest) -> web.Response:
            count, healthy = self.counts.get(name, 0), self.healthy()
            return web.Response(status=200 if count and healthy else 503, text=body(name, count, healthy),
                                content_type="application/json",
                                headers={"X-Content-Type-Options": "nosniff"})

        runner = web.ServerRunner(web.Server(handle, access_log=None))
        await runner.setup()
        sites = []
        try:
            for addr in self.addresses:
                site = web.TCPSite(runner, addr, port, reuse_address=True)
                await site.start()
                sites.append(site)
        except OSError as e:
            log.warning("health check port %d of %s/%s: %s; retried at the next sync", port, *name, e)
            await runner.cleanup()
            return
        self._open[name] = (port, sites, runner)
        log.info("serving the health check of %s/%s on port %d", *name, port)

    async def _close(self, name: Name) -> None:
        entry = self._open.pop(name, None)
        if entry is not None:
            with contextlib.suppress(Exception):
                await entry[2].cleanup()

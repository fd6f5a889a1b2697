"""The cluster DNS component: informers over the API feed `ClusterRecords`; listeners answer from them.

`serve(config: DNSConfig, ready)` is the `dns` component of `nodeagent server` / `up` and the body of
`nodeagent dns`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from nodeagent.client.informer import SharedInformers
from nodeagent.client.rest import Client, ClientError
from nodeagent.dns.config import DNSConfig
from nodeagent.dns.forward import Forwarder
from nodeagent.dns.records import KINDS, ClusterRecords, Obj
from nodeagent.dns.server import Handler, run_listeners, split_hostport

log = logging.getLogger("nodeagent.dns")
SYNC_WAIT = 5.0  # serve after this long even if the informers have not listed
REPAIR_INTERVAL = 30.0  # re-ensure the kube-dns registration
BIND_RETRY = 10.0  # as a server component: retry an address that cannot be bound


RESOURCES = {"services": "services", "endpointslices": "endpointslices.discovery.k8s.io",
             "endpoints": "endpoints", "pods": "pods", "namespaces": "namespaces"}


class ClusterSource:
    """One informer per kind (the process's: in `up`, netproxy, netpol and the kubelet read the same caches);
    handlers only hand each event to `ClusterRecords.changed` (no I/O); `detach` removes them."""

    def __init__(self, client: Client) -> None:
        self.shared = SharedInformers(client, share=True)
        self.informers = {kind: self.shared.get(RESOURCES[kind]) for kind in KINDS}

    def lister(self, kind: str) -> Iterable[Obj]:
        return self.informers[kind].cache.values()

    def attach(self, records: ClusterRecords) -> None:
        for kind in self.informers:
            self.shared.add_handler(RESOURCES[kind], lambda o, k=kind: records.changed(k, None, o),
                                    lambda old, new, k=kind: records.changed(k, old, new),
                                    lambda o, k=kind: records.changed(k, o, None))

    def detach(self) -> None:
        self.shared.release()

    async def run(self, tg: asyncio.TaskGroup, records: ClusterRecords, wait: float | None = None) -> None:
        """Start every informer in `tg`; return once each has delivered its first list, or after `wait`
        seconds (CoreDNS's behaviour: serve anyway, SERVFAIL instead of NXDOMAIN until synced)."""
        for kind, inf in self.informers.items():
            tg.create_task(inf.run(client=self.shared.client), name=f"dns-informer-{kind}")

        async def all_synced() -> None:
            await asyncio.gather(*(inf.wait_synced() for inf in self.informers.values()))
            records.set_synced()

        wait = SYNC_WAIT if wait is None else wait
        synced = tg.create_task(all_synced(), name="dns-informers-synced")
        done, _ = await asyncio.wait([synced], timeout=wait)
        if not done:
            log.warning("dns: the API is not listed yet after %.0fs; serving (SERVFAIL for unknown cluster "
                        "names until it is)", wait)


async def run_dns(cfg: DNSConfig, client: Client, ready: asyncio.Event | None = None,
                  bound: list[tuple[str, int]] | None = None) -> None:
    """Informers, then listeners; until cancelled. `bound` receives the (host, port) actually bound."""
    source = ClusterSource(client)
    records = ClusterRecords(source.lister, cfg.cluster_domain, cfg.ttl, cfg.pods)
    records.synced = False
    source.attach(records)
    ups = cfg.upstream_addrs()
    kept = [u for u in ups if not _is_self(u, split_hostport(cfg.listen))]
    if kept != ups:
        log.warning("dns: dropping upstreams that are this server (a forwarding loop): %s",
                    [u for u in ups if u not in kept])
        ups = kept
    handler = Handler(records, Forwarder(ups, cfg.upstream_timeout) if ups else None)
    bound = bound if bound is not None else []
    listening = asyncio.Event()
    try:
        async with asyncio.TaskGroup() as tg:
            await source.run(tg, records)
            tg.create_task(run_listeners(handler, cfg.listen, listening, bound), name="dns-listeners")
            await listening.wait()
            if cfg.register_service:
                await _register(cfg, client, bound[0])
                tg.create_task(_repair(cfg, client, bound[0]), name="dns-register-repair")
            if ready is not None:
                ready.set()
    finally:
        source.detach()


async def _repair(cfg: DNSConfig, client: Client, bound: tuple[str, int]) -> None:
    """Re-ensure the kube-dns Service and slice periodically (someone may delete or edit them)."""
    while True:
        await asyncio.sleep(REPAIR_INTERVAL)
        await _register(cfg, client, bound, quiet=True)


def _is_self(upstream: tuple[str, int], listen: tuple[str, int]) -> bool:
    """An upstream this very server answers on: the listen address, or loopback when listening on all."""
    if upstream == listen:
        return True
    return listen[0] in ("0.0.0.0", "", "::") and upstream[1] == listen[1] and \
        (upstream[0].startswith("127.") or upstream[0] == "::1")


async def _register(cfg: DNSConfig, client: Client, bound: tuple[str, int], quiet: bool = False) -> None:
    """kube-system/kube-dns → this server; retried until the apiserver takes it."""
    from nodeagent.api.kube_dns import default_service_ip
    from nodeagent.dns.register import ensure_dns_service

    ip = cfg.advertise_address or bound[0]
    service_ip = cfg.service_ip or default_service_ip(cfg.service_cluster_ip_range)
    delay = 0.2
    while True:
        try:
            await ensure_dns_service(client, service_ip, ip, bound[1], quiet)
            return
        except ClientError as e:
            log.warning("dns: registering kube-system/kube-dns: %s; retrying in %.1fs", e, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)


async def serve(config: DNSConfig, ready: asyncio.Event) -> None:
    """The runner component: cluster DNS from the cluster's informers. As a part of the server
    (`retry_bind`), an address it cannot bind (port 53 taken) is retried instead of stopping the
    whole control plane; `nodeagent dns` alone fails at once."""
    cfg = config
    client = Client.from_kubeconfig(cfg.kubeconfig)
    try:
        while True:
            try:
                await run_dns(cfg, client, ready)
                return
            except* OSError as eg:
                if not cfg.retry_bind:
                    raise
                log.error("dns: cannot serve on %s (%s); retrying in %.0fs", cfg.listen, eg.exceptions[0],
                          BIND_RETRY)
            await asyncio.sleep(BIND_RETRY)
    finally:
        await client.close()

"""The apiserver process: PKI, tokens, store, bootstrap, HTTPS listener (its component:
`apiserver.service`)."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from pathlib import Path
from typing import Any

from aiohttp import web

from kernel import unix_socket
from nodeagent.apiserver import auth, kubeconfig, pki, resource_metrics
from nodeagent.apiserver.allocator import Allocators
from nodeagent.apiserver.authn.serviceaccount import ServiceAccountAuthenticator, ServiceAccountKeys
from nodeagent.apiserver.authz import node_restriction
from nodeagent.apiserver.authz import reconcile as rbac_policy
from nodeagent.apiserver.authz.chain import Authorizer
from nodeagent.apiserver.authz.escalation import EscalationCheck
from nodeagent.apiserver.bootstrap import Bootstrap
from nodeagent.apiserver.bootstrap_auth import BootstrapTokenAuthenticator
from nodeagent.apiserver.cache import WatchCache
from nodeagent.apiserver.config import ApiServerConfig
from nodeagent.apiserver.crds import install_bundled
from nodeagent.apiserver.handlers import Handlers
from nodeagent.apiserver.in_process import LocalEntry
from nodeagent.apiserver.inflight import InFlightLimit
from nodeagent.apiserver.join_token import JoinTokens
from nodeagent.apiserver.key_layout import migrate_legacy_keys
from nodeagent.apiserver.metrics_api import NODES, MetricsAPI
from nodeagent.apiserver.peers import PeerLeases
from nodeagent.apiserver.registry import SERVICES, Registry
from nodeagent.client import in_process
from nodeagent.store import open_store
from nodeagent.store.compactor import DEFAULT_INTERVAL, run_compactor

log = logging.getLogger("nodeagent.apiserver")


def advertise_ip(bind: str) -> str:
    if bind not in ("0.0.0.0", "::", ""):
        return bind
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent; picks the default-route source address
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def client_host(bind: str) -> str:
    if bind in ("0.0.0.0", "", "127.0.0.1"):
        return "127.0.0.1"
    if bind == "::":
        return "[::1]"
    return f"[{bind}]" if ":" in bind else bind


class ApiServer:
    """One running apiserver; `start()` binds and bootstraps, `stop()` releases everything."""

    def __init__(self, cfg: ApiServerConfig, store: Any = None,
                 compact_interval: float = DEFAULT_INTERVAL) -> None:
        self.cfg = cfg
        self.data_dir = Path(cfg.data_dir)
        self.store = store if store is not None else open_store(cfg.datastore, cfg.data_dir)
        self.compact_interval = compact_interval
        self.advertise = cfg.advertise_address or advertise_ip(cfg.bind_address)
        self.tokens = auth.TokenFile(self.data_dir / "tokens.csv")
        self.registry = Registry(self.store, Allocators(cfg.service_cluster_ip_range))
        self.kubeconfig_path = self.data_dir / "admin.kubeconfig"
        self._runner: web.ServerRunner | None = None
        self._tasks: list[asyncio.Task] = []
        self.cache: WatchCache | None = None
        self.authorizer: Authorizer | None = None
        self.peers: PeerLeases | None = None
        self._fetcher: resource_metrics.KubeletFetcher | None = None
        self.port = cfg.port
        self.local_socket: str | None = None  # where the embedded components' socket is served, once it is
        self.local_entry: LocalEntry | None = None  # the in-process entry, under that socket's name

    def _ssl(self) -> ssl.SSLContext:
        # pods reach us as https://kubernetes.default.svc = the range's first IP: that must verify too
        ips = [self.advertise, self.cfg.bind_address, self.registry.alloc.first_ip]
        crt, key = pki.ensure_serving_cert(self.data_dir / "pki", ips)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(crt), str(key))
        ctx.verify_mode = ssl.CERT_OPTIONAL  # client certificates from the cluster CA authenticate (nodes)
        ctx.load_verify_locations(cafile=str(self.data_dir / "pki" / "ca.crt"))
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ctx = await asyncio.to_thread(self._ssl)
        admin_token = self.tokens.issue("admin", (auth.MASTERS_GROUP,))
        await self.store.start()
        await migrate_legacy_keys(self.store)
        services, _ = await self.store.list(SERVICES.key_prefix())
        self.registry.rebuild_allocators(services)
        from nodeagent.apiserver.proxy import KubeletProxy, kubelet_address

        self.cache = WatchCache(self.store)
        await self.cache.start()
        self.registry.cache = self.cache
        bootstrap_tokens = BootstrapTokenAuthenticator(self.store, self.cache)
        sa_keys = await asyncio.to_thread(ServiceAccountKeys, self.data_dir / "pki",
                                          self.cfg.service_account_issuer, self.cfg.api_audiences)
        service_accounts = ServiceAccountAuthenticator(sa_keys, bootstrap_tokens.get)
        join = JoinTokens(self.registry, bootstrap_tokens, self.data_dir, "", self.cfg.token_ttl)
        kubelets = KubeletProxy(self.data_dir / "pki" / "ca.crt")
        storage = resource_metrics.Storage(self.cfg.metric_resolution)
        self.authorizer = Authorizer(self.cache, self.store.get)
        escalation = EscalationCheck(self.authorizer)

        async def write_check(resource: str, group: str, obj: dict[str, Any],
                              old: dict[str, Any] | None) -> None:
            await node_restriction.check(resource, group, obj, old)  # NodeRestriction, then RBAC escalation
            await escalation(resource, group, obj, old)

        self.registry.write_check = write_check
        handlers = Handlers(self.registry, self.cache, self.tokens, f"{self.advertise}:{self.cfg.port}",
                            kubelets, bootstrap_tokens, join, MetricsAPI(storage, self.cache),
                            service_accounts, self.authorizer)
        self.registry.enable_webhooks(handlers.metrics)
        handlers.inflight = InFlightLimit(self.cfg.max_requests_inflight,
                                          self.cfg.max_mutating_requests_inflight, handlers.metrics)
        self._fetcher = resource_metrics.KubeletFetcher(kubelets.client_ssl)
        cache = self.cache

        async def nodes() -> list[dict[str, Any]]:
            return [e.obj for e in cache.list(NODES.key_prefix(), None)[0]]

        scraper = resource_metrics.Scraper(storage, nodes, kubelet_address, self._fetcher)
        # the shipped OpenAPI documents are read while the server starts, not by its first write
        self._tasks.append(asyncio.get_running_loop().create_task(asyncio.to_thread(handlers.openapi.warm),
                                                                  name="openapi-warm"))
        server = web.Server(handlers.handle, access_log=None)
        self._runner = web.ServerRunner(server, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.cfg.bind_address, self.cfg.port, ssl_context=ctx, backlog=1024)
        await site.start()
        if self.cfg.port == 0:
            self.port = self._runner.addresses[0][1]  # the TCP site's bound address
        if self.cfg.local_socket:
            await self._serve_local_socket(self._runner, self.cfg.local_socket)
        if self.local_socket is not None:  # components in this process call the handlers directly
            self.local_entry = LocalEntry(handlers.handle)
            in_process.servers.register(self.local_socket, self.local_entry)
        host = f"[{self.advertise}]" if ":" in self.advertise else self.advertise
        sa_keys.jwks_uri = f"https://{host}:{self.port}/openid/v1/jwks"
        self.peers = PeerLeases(self.registry, self.advertise, self.port, self.cfg.lease_duration)
        await self.peers.renew()
        ca_pem = (self.data_dir / "pki" / "ca.crt").read_text()
        boot = Bootstrap(self.registry, self.advertise, self.port, self.peers, ca_pem, dns=self.cfg.dns_addon)
        await boot.ensure()
        await rbac_policy.ensure(self.registry)  # the bootstrap roles and bindings, as kube's post-start hook
        await boot.ensure_default_storage_class()
        join.server_url = f"https://{host}:{self.port}"
        await join.start()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(join.run(), name="join"))
        interval = min(self.cfg.repair_interval, self.cfg.lease_duration / 3)
        self._tasks.append(loop.create_task(boot.run(interval), name="bootstrap"))
        # parsing the bundled CRDs takes most of a second: served a moment after the server is
        self._tasks.append(loop.create_task(install_bundled(self.registry), name="bundled-crds"))
        self._tasks.append(loop.create_task(run_compactor(self.store, interval=self.compact_interval),
                                            name="compactor"))
        self._tasks.append(loop.create_task(scraper.run(), name="resource-metrics"))
        ca = (self.data_dir / "pki" / "ca.crt").read_bytes()
        text = kubeconfig.render(f"https://{client_host(self.cfg.bind_address)}:{self.port}", ca, admin_token)
        kubeconfig.write(self.kubeconfig_path, text)
        paths = [self.kubeconfig_path]
        if self.cfg.admin_kubeconfig_copy:
            copy = Path(self.cfg.admin_kubeconfig_copy)
            try:
                kubeconfig.write(copy, text)
                paths.append(copy)
            except OSError as e:
                log.warning("could not write %s: %s", copy, e)
        log.info("apiserver serving on https://%s:%d (%s store)", self.cfg.bind_address, self.port,
                 type(self.store).__name__)
        for p in paths:
            log.info("admin kubeconfig: %s", p)
            print(f"admin kubeconfig: {p}  (export KUBECONFIG={p})", flush=True)
        if self.cfg.user_kubeconfig:
            self._write_user_kubeconfig(self.cfg.user_kubeconfig, text)
        url = f"https://{client_host(self.cfg.bind_address)}:{self.port}"
        for comp in self.cfg.components:  # each embedded component under its own identity, not as admin
            token = self.tokens.issue(comp.user, comp.groups)
            kubeconfig.write(Path(comp.path), kubeconfig.render(url, ca, token, user=comp.user,
                                                                local_socket_path=self.local_socket))

    async def _serve_local_socket(self, runner: web.ServerRunner, path: str) -> None:
        """The same handlers on a root-only Unix socket, for the components in this process: every request
        still carries its component's token (authentication, RBAC, admission, max-in-flight and metrics as
        over HTTPS), without TLS and TCP. Without it (a path too long for a socket) they use HTTPS."""
        try:
            sock = unix_socket.bind_private(path)
        except (OSError, unix_socket.SocketPathError) as e:
            log.warning("local apiserver socket %s: %s; the embedded components use HTTPS", path, e)
            return
        try:
            await web.SockSite(runner, sock).start()
        except BaseException:
            sock.close()
            unix_socket.remove(path)
            raise
        self.local_socket = path

    @staticmethod
    def _write_user_kubeconfig(target: kubeconfig.UserKubeconfig, text: str) -> None:
        """Best effort, as the copy: the cluster runs whether or not a person's kubeconfig took it."""
        try:
            made = kubeconfig.write_for_user(target, text)
        except (OSError, kubeconfig.KubeconfigError) as e:
            log.warning("could not merge the admin kubeconfig into %s: %s (use --write-kubeconfig PATH, "
                        "or export KUBECONFIG as above)", target.path, e)
            return
        how = "written to" if made else "merged into"
        msg = f"kubeconfig: context {target.context!r} {how} {target.path}: kubectl works as it is"
        log.info("%s", msg)
        print(msg, flush=True)

    async def stop(self) -> None:
        if self.local_entry is not None and self.local_socket is not None:
            in_process.servers.unregister(self.local_socket, self.local_entry)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except BaseException:
                pass
        if self._fetcher is not None:
            await self._fetcher.close()
        if self.peers is not None:
            await self.peers.release()
        if self.authorizer is not None:
            self.authorizer.rbac.close()
        if self.cache is not None:
            await self.cache.stop()
        if self.local_entry is not None:
            await self.local_entry.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self.local_socket is not None:
            unix_socket.remove(self.local_socket)
        await self.registry.close()
        await self.store.close()

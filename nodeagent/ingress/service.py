"""The ingress component: informers → one desired model → rendered HAProxy config → validated → installed
(ingress-nginx's pipeline), plus, where `manage` is set, the cluster-wide duties done by one writer: the
default IngressClass, Ingress and Gateway API statuses, and Warning events for what cannot be served.

`serve(config: IngressConfig, ready)` is the `ingress` component of `up` (both parts), `server` (manage
only) and `agent` (the proxy only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kernel.fs import atomic_write
from nodeagent.client.events import EventRecorder
from nodeagent.client.informer import Store, shared
from nodeagent.client.leader import LeaderElector
from nodeagent.client.loadbalancer import set_load_balancer_status
from nodeagent.client.rest import Client, ClientError
from nodeagent.ingress import gateway
from nodeagent.ingress.config import IngressConfig
from nodeagent.ingress.haproxy import Listen, render
from nodeagent.ingress.model import (
    CONTROLLER,
    DEFAULT_CLASS_ANNOTATION,
    TLS_SECRET_TYPE,
    Desired,
    Problem,
    build,
    ours,
)
from nodeagent.ingress.proxy import HAProxy, InvalidConfig, ProxyDown
from nodeagent.ingress.secrets import TLSSecrets, may_read_all

log = logging.getLogger("nodeagent.ingress")

INGRESSES = "ingresses.networking.k8s.io"
CORE = {"ingresses": INGRESSES, "ingressclasses": "ingressclasses.networking.k8s.io", "services": "services",
        "endpointslices": "endpointslices.discovery.k8s.io"}
SETTLE = 0.05  # seconds to let a burst of watch events coalesce into one sync
GATEWAY_API_POLL = 2.0  # seconds between checks that the Gateway API is served
# the kind of an object a problem is reported on → (its informer, its apiVersion)
EVENT_KINDS = {"Ingress": ("ingresses", "networking.k8s.io/v1"),
               "HTTPRoute": ("httproutes", f"{gateway.GROUP}/{gateway.VERSION}")}
RETRY = 2.0
LEASE_NAME = "nodeagent-ingress"  # kube-system: one server writes the statuses and events
DEFAULT_CERT_NAME = "nodeagent ingress default certificate"


class Controller:
    def __init__(self, cfg: IngressConfig, client: Client, proxy: HAProxy | None,
                 recorder: EventRecorder | None) -> None:
        self.cfg = cfg
        self.client = client
        self.proxy = proxy
        self.recorder = recorder
        self.dirty = asyncio.Event()
        # the process's informers (shared with DNS, netpol, the kubelet, the controllers...); the Secrets'
        # once `run` knows what this credential may read (secrets.py)
        self.informers: dict[str, Store] = {k: shared(client, r) for k, r in CORE.items()}
        self.secrets: TLSSecrets | None = None
        if cfg.manage:
            self.informers["nodes"] = shared(client, "nodes")
        self._removers: list[Callable[[], None]] = []
        self.gateway_api = False
        self.syncs = 0
        self.last_error = ""
        self._reported: set[Problem] = set()
        self.synced = asyncio.Event()  # the first sync went through
        # the cluster-wide duties (classes, statuses, events) are done by one leader among the servers
        self.leading = False
        self._classes_ensured = False

    async def lead(self) -> None:
        """The leader's work: the next syncs write statuses and events; until the lease is lost."""
        self.leading = True
        self._classes_ensured = False
        self.dirty.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.leading = False

    async def gateway_api_served(self) -> bool:
        try:
            await self.client.request("GET", f"/apis/{gateway.GROUP}/{gateway.VERSION}")
        except ClientError as e:
            if not e.not_found:
                log.debug("ingress: asking for %s: %s", gateway.GROUP, e)
            return False
        return True

    async def watch_gateway_api(self, tg: asyncio.TaskGroup) -> None:
        """Watch the Gateway API's kinds once the server serves them (the server installs their CRDs a
        moment after it starts; a person may install them later)."""
        logged = False
        while not await self.gateway_api_served():
            if not logged:
                log.info("ingress: %s is not served yet; Gateway API objects are watched once it is",
                         gateway.GROUP)
                logged = True
            await asyncio.sleep(GATEWAY_API_POLL)
        added = {kind: shared(self.client, res) for kind, res in gateway.RESOURCES.items()}
        for kind, inf in added.items():
            inf.add_handler(self._mark, lambda _old, _new: self._mark(), self._mark)
            tg.create_task(inf.run(), name=f"ingress-informer-{kind}")
        await asyncio.gather(*(inf.wait_synced() for inf in added.values()))
        self.informers.update(added)
        self.gateway_api = True
        self._classes_ensured = False  # the GatewayClass too, by the next sync that leads
        log.info("ingress: watching Gateway API objects")
        self.dirty.set()

    def objects(self, kind: str) -> list[dict[str, Any]]:
        if kind == "secrets" and self.secrets is not None:
            return self.secrets.list()
        inf = self.informers.get(kind)
        return inf.list() if inf else []

    async def run(self, tg: asyncio.TaskGroup) -> None:
        try:
            await self._run(tg)
        finally:  # the shared informers live on for the others
            for remove in self._removers:
                remove()
            if self.secrets is not None:
                self.secrets.stop()

    async def _run(self, tg: asyncio.TaskGroup) -> None:
        self.secrets = TLSSecrets(self.client, await may_read_all(self.client), self._mark)
        self.informers["secrets"] = self.secrets.main
        if not self.secrets.all_types:
            log.info("ingress: this credential may not read every Secret: serving kubernetes.io/tls ones and "
                     "those Ingresses name")
        for kind, inf in self.informers.items():
            self._removers.append(inf.add_handler(self._mark, lambda _old, _new: self._mark(), self._mark))
            tg.create_task(inf.run(client=self.client), name=f"ingress-informer-{kind}")
        await asyncio.gather(*(inf.wait_synced() for inf in self.informers.values()))
        tg.create_task(self.watch_gateway_api(tg), name="ingress-gateway-api")
        self.dirty.set()
        while True:
            await self.dirty.wait()
            await asyncio.sleep(SETTLE)
            self.dirty.clear()
            self.secrets.follow(self.objects("ingresses"), tg)
            try:
                await self.sync()
            except (ClientError, InvalidConfig, ProxyDown, OSError) as e:
                self.last_error = str(e)
                log.error("ingress: sync failed (%s); the last good configuration keeps serving; "
                          "retrying in %.0fs", e, RETRY)
                tg.create_task(self._mark_later(RETRY), name="ingress-retry")
            else:
                self.synced.set()

    def _mark(self, *_: object) -> None:
        self.dirty.set()

    async def _mark_later(self, delay: float) -> None:
        await asyncio.sleep(delay)
        self.dirty.set()

    def desired(self) -> tuple[Desired, gateway.Result]:
        classes = self.objects("ingressclasses")
        mine = [i for i in self.objects("ingresses") if ours(i, classes, self.cfg.class_name)]
        services, slices = self.objects("services"), self.objects("endpointslices")
        gw = gateway.build(self.objects("gatewayclasses"), self.objects("gateways"),
                           self.objects("httproutes"), self.objects("referencegrants"),
                           self.objects("namespaces"), services, slices, self._typed_secrets()) \
            if self.gateway_api else gateway.Result()
        desired = build(mine, services, slices, self.objects("secrets"), gw.routes, gw.backends, gw.problems,
                        gw.certificates)
        return desired, gw

    def _typed_secrets(self) -> list[dict[str, Any]]:
        """The Gateway API's listeners take kubernetes.io/tls Secrets (its core support), as before."""
        return [s for s in self.objects("secrets") if s.get("type") == TLS_SECRET_TYPE]

    async def sync(self) -> None:
        self.syncs += 1
        desired, gw = self.desired()
        if self.proxy is not None:
            certs = {self.proxy.cert_path(c.name, c.pem): c.pem for c in desired.certificates}
            listen = Listen(self.cfg.listen_address, self.cfg.http_port, self.cfg.https_port,
                            self.cfg.metrics_port)
            rendered = render(desired, listen, self.proxy.files, list(certs))
            how = await self.proxy.apply(rendered, certs)
            if how != "unchanged":
                log.info("ingress: %d routes to %d backends %s", len(desired.routes), len(desired.backends),
                         how)
        if self.cfg.manage and self.leading:
            if not self._classes_ensured:
                # marked first: the Gateway API appearing while this awaits marks it again, so the next sync
                # creates the GatewayClass (marking after the await lost that, and the class was never made)
                self._classes_ensured = True
                try:
                    await self.ensure_class()
                except BaseException:
                    self._classes_ensured = False
                    raise
            await self.report(desired.problems)
            await self.write_statuses(gw)
        self.last_error = ""

    async def report(self, problems: tuple[Problem, ...]) -> None:
        """A Warning event for each problem not reported since it last appeared."""
        now = set(problems)
        for p in now - self._reported:
            informer, api_version = EVENT_KINDS[p.kind]
            obj = self.informers[informer].get(p.name, p.namespace) if informer in self.informers else None
            if obj is not None and self.recorder is not None:
                self.recorder.record({**obj, "kind": p.kind, "apiVersion": api_version}, "Warning", p.reason,
                                     p.message)
            log.warning("ingress: %s %s/%s: %s", p.kind, p.namespace, p.name, p.message)
        self._reported = now

    def node_addresses(self) -> list[str]:
        out = []
        for n in self.objects("nodes"):
            for a in (n.get("status") or {}).get("addresses") or []:
                if a.get("type") == "InternalIP":
                    out.append(a["address"])
        return out

    async def write_statuses(self, gw: gateway.Result) -> None:
        addresses = self.node_addresses()
        classes = self.objects("ingressclasses")
        for ing in self.objects("ingresses"):
            if ours(ing, classes, self.cfg.class_name):
                with _not_found_ok():
                    await set_load_balancer_status(self.client, INGRESSES, ing, addresses)
        if self.gateway_api:
            for kind, key, status in gw.statuses(addresses):
                obj = self.informers[kind].get(key[1], key[0] or None)
                if obj is None:
                    continue
                status = gateway.keep_transition_times(obj.get("status") or {}, status)
                if status == {k: (obj.get("status") or {}).get(k) for k in status}:
                    continue
                with _not_found_ok():
                    await self.client.patch(gateway.RESOURCES[kind], key[1], {"status": status},
                                            key[0] or None, subresource="status")

    async def ensure_class(self) -> None:
        """IngressClass `nodeagent`, the default, and GatewayClass `nodeagent`, created when absent (a
        person's edits are kept)."""
        if self.gateway_api and self.informers["gatewayclasses"].get(gateway.CLASS_NAME) is None:
            await gateway.ensure_class(self.client)
        if self.informers["ingressclasses"].get(self.cfg.class_name) is not None:
            return
        body = {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
                "metadata": {"name": self.cfg.class_name, "annotations": {DEFAULT_CLASS_ANNOTATION: "true"},
                             "labels": {"app.kubernetes.io/managed-by": "nodeagent"}},
                "spec": {"controller": CONTROLLER}}
        try:
            await self.client.create("ingressclasses.networking.k8s.io", body)
            log.info("ingress: created IngressClass %s (the default)", self.cfg.class_name)
        except ClientError as e:
            if not e.already_exists:
                raise


@contextlib.contextmanager
def _not_found_ok() -> Iterator[None]:
    try:
        yield
    except ClientError as e:
        if not (e.not_found or e.conflict):
            raise


def ensure_default_certificate(path: str) -> None:
    """The self-signed certificate served to names no Secret covers, made once per data dir (in a child
    process where cryptography is not loaded here: nodeagent/isolated.py)."""
    from nodeagent.isolated import call

    if Path(path).exists():
        return
    crt, key = (s.encode() for s in call("nodeagent.ingress.service:_self_signed", DEFAULT_CERT_NAME))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, crt + key, 0o600)


def _self_signed(name: str) -> list[str]:
    from nodeagent.pki import self_signed

    return [b.decode() for b in self_signed(name)]


async def serve(config: IngressConfig, ready: asyncio.Event) -> None:
    """The runner component (see the module's docstring)."""
    proxy = HAProxy(config.haproxy, config.work_dir) if config.run_proxy else None
    if proxy is not None:
        await asyncio.to_thread(Path(config.work_dir).mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread(ensure_default_certificate, proxy.files.default_certificate)
    client = config.credentials.client()
    recorder = EventRecorder(client, "nodeagent-ingress", config.node_name) if config.manage else None
    controller = Controller(config, client, proxy, recorder)
    try:
        async with asyncio.TaskGroup() as tg:
            if recorder is not None:
                tg.create_task(recorder.run(), name="ingress-events")
            started = asyncio.Event()
            if proxy is not None:
                tg.create_task(proxy.run(started), name="ingress-haproxy")
            else:
                started.set()
            tg.create_task(controller.run(tg), name="ingress-sync")
            if config.manage:
                identity = f"{socket.gethostname()}-{os.getpid()}-{id(client):x}"
                elector = LeaderElector(client, LEASE_NAME, identity)
                tg.create_task(elector.run(controller.lead), name="ingress-leader")
            await controller.synced.wait()
            await started.wait()
            log.info("ingress: serving%s",
                     f" on :{config.http_port} and :{config.https_port}" if proxy else " (statuses only)")
            ready.set()
    finally:
        await client.close()

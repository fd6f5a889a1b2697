"""Secrets and ConfigMaps the kubelet's pods refer to, kept by watches (kubelet's watch-based manager).

Each pod registers the names it refers to (env, envFrom, imagePullSecrets); every (namespace, name) gets one
single-object watch (`fieldSelector=metadata.name=<name>`) while any registered pod refers to it, and
loses it when the last one is unregistered. A container start reads from these caches, never a GET per
start; a read waits for the object's first list (kubelet waits up to a second; we allow the slower host
more), then answers from memory: the object, or NotFound with the API's message (`secret "x" not found`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nodeagent.api.pod_refs import configmap_names, secret_names
from nodeagent.client.informer import Informer, shared
from nodeagent.client.rest import Client
from nodeagent.kubelet.envvars import Env, EnvError, NotFound, PodContext, make_environment, service_env
from nodeagent.kubelet.pullsecrets import Credential, credentials_for
from nodeagent.kubelet.static_pods import is_static_pod

log = logging.getLogger("nodeagent.kubelet.secrets")

SYNC_TIMEOUT = 5.0

Ref = tuple[str, str]  # (namespace, name)


class ObjectCache:
    """Single-object watches for the Secrets (or ConfigMaps) registered pods refer to."""

    def __init__(self, client: Client, resource: str, singular: str, *,
                 names: Callable[[Mapping[str, Any]], set[str]], sync_timeout: float = SYNC_TIMEOUT) -> None:
        self.client = client
        self.resource = resource
        self.singular = singular  # as the API's NotFound names it: secret, configmap
        self.names = names
        self.sync_timeout = sync_timeout
        self._by_pod: dict[str, set[Ref]] = {}
        self._watches: dict[Ref, tuple[Informer, asyncio.Task[None]]] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._started = asyncio.Event()
        # called with the uids of the pods that refer to an object when its watch sees it change
        self.on_change: Callable[[set[str]], None] | None = None

    async def run(self) -> None:
        """Own the watches until cancelled."""
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            self._started.set()
            try:
                await asyncio.Future()
            finally:
                self._tg = None

    async def wait_started(self) -> None:
        await self._started.wait()

    def register(self, pod: Mapping[str, Any]) -> None:
        """Watch what `pod` refers to now (and stop what it no longer does)."""
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        refs = {(ns, n) for n in self.names(pod)}
        old = self._by_pod.get(meta.get("uid", ""), set())
        self._by_pod[meta.get("uid", "")] = refs
        for ref in refs:
            self._watch(ref)  # a no-op for what is watched already
        self._release(old - refs)

    def unregister(self, uid: str) -> None:
        self._release(self._by_pod.pop(uid, set()))

    def watched(self) -> set[Ref]:
        return set(self._watches)

    def _watch(self, ref: Ref) -> None:
        if ref in self._watches or self._tg is None:
            return
        ns, name = ref
        inf = Informer(self.client, self.resource, namespace=ns, field_selector=f"metadata.name={name}")

        def notify(*_: Any) -> None:
            if self.on_change is not None:
                self.on_change({uid for uid, refs in self._by_pod.items() if ref in refs})
        inf.add_handler(notify, notify, notify)
        task = self._tg.create_task(inf.run(), name=f"kubelet-{self.singular}-{ns}/{name}")
        self._watches[ref] = (inf, task)

    def _release(self, refs: Iterable[Ref]) -> None:
        refs = set(refs)
        if not refs:  # the common case (a pod's sync registers what it referred to already): no scan
            return
        still = set().union(*self._by_pod.values()) if self._by_pod else set()
        for ref in refs:
            if ref in still:
                continue
            entry = self._watches.pop(ref, None)
            if entry is not None:
                entry[1].cancel()

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        """The object from its watch; NotFound when it does not exist."""
        entry = self._watches.get((namespace, name))
        if entry is None:
            raise EnvError(f'object "{namespace}"/"{name}" not registered')
        inf = entry[0]
        if not inf.synced.is_set():
            try:
                await asyncio.wait_for(inf.synced.wait(), self.sync_timeout)
            except TimeoutError:
                raise EnvError(f"failed to sync {self.singular} cache: timed out waiting for the condition") \
                    from None
        obj = inf.get(name, namespace)
        if obj is None:
            raise NotFound(f'{self.singular} "{name}" not found')
        return obj


class PodObjects:
    """The API objects a container start reads: Secrets and ConfigMaps by watch, Services by informer.

    The kubelet registers each pod it syncs and unregisters it when the pod is gone; `environment` builds a
    container's variables and `pull_credentials` the logins for its image from these caches.
    """

    def __init__(self, client: Client, *, host_ips: Callable[[], list[str]],
                 node_allocatable: Callable[[], Mapping[str, Any]],
                 sync_timeout: float = SYNC_TIMEOUT) -> None:
        self.secrets = ObjectCache(client, "secrets", "secret", names=secret_names, sync_timeout=sync_timeout)
        self.configmaps = ObjectCache(client, "configmaps", "configmap", names=configmap_names,
                                      sync_timeout=sync_timeout)
        self.client = client
        self.services = shared(client, "services")  # the process's: in `up`, netproxy's and DNS's cache too
        self.host_ips = host_ips
        self.node_allocatable = node_allocatable
        self.sync_timeout = sync_timeout

    async def run(self, ready: asyncio.Event | None = None) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.secrets.run(), name="kubelet-secret-watches")
            tg.create_task(self.configmaps.run(), name="kubelet-configmap-watches")
            tg.create_task(self.services.run(client=self.client), name="kubelet-services")
            await self.secrets.wait_started()
            await self.configmaps.wait_started()
            if ready is not None:
                ready.set()

    def register(self, pod: Mapping[str, Any]) -> None:
        self.secrets.register(pod)
        self.configmaps.register(pod)

    def unregister(self, uid: str) -> None:
        self.secrets.unregister(uid)
        self.configmaps.unregister(uid)

    async def _service_env(self, pod: Mapping[str, Any]) -> dict[str, str]:
        """The Service variables; the Services are read at least once first (a static pod does not wait:
        it may run before any apiserver answers)."""
        if not self.services.synced.is_set() and not is_static_pod(pod):
            try:
                await asyncio.wait_for(self.services.synced.wait(), self.sync_timeout)
            except TimeoutError:
                raise EnvError("services have not yet been read at least once, cannot construct envvars") \
                    from None
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        links = spec.get("enableServiceLinks")
        return service_env(self.services.list(), meta.get("namespace") or "default",
                           True if links is None else bool(links))

    async def environment(self, pod: Mapping[str, Any], container: Mapping[str, Any],
                          pod_ips: list[str]) -> Env:
        """The container's variables (EnvError: it cannot start yet, CreateContainerConfigError)."""
        ns = (pod.get("metadata") or {}).get("namespace") or "default"
        self.register(pod)
        one = {"spec": {"containers": [container]}}
        secrets = await _fetch(self.secrets, ns, secret_names(one))
        configmaps = await _fetch(self.configmaps, ns, configmap_names(one))
        services = await self._service_env(pod)
        ctx = PodContext(tuple(pod_ips), tuple(self.host_ips()), dict(self.node_allocatable()))
        return make_environment(pod, container, get_secret=_from(secrets), get_configmap=_from(configmaps),
                                services=services, ctx=ctx)

    async def pull_credentials(self, pod: Mapping[str, Any],
                               image: str) -> tuple[list[Credential], list[str]]:
        """(credentials to try for `image`, pull Secrets that could not be read) — getPullSecretsForPod: a
        missing Secret is skipped, and the pull goes on without it. KeyringError for a malformed one."""
        ns = (pod.get("metadata") or {}).get("namespace") or "default"
        self.register(pod)
        found, missing = [], []
        for ref in (pod.get("spec") or {}).get("imagePullSecrets") or []:
            name = ref.get("name") or ""
            if not name:
                continue
            try:
                found.append(await self.secrets.get(ns, name))
            except EnvError as e:
                log.info("pod %s/%s: pull secret %s: %s; the image pull may not succeed",
                         ns, (pod.get("metadata") or {}).get("name"), name, e)
                missing.append(f"{ns}/{name}")
        return credentials_for(image, found), missing


async def _fetch(cache: ObjectCache, ns: str,
                 names: Iterable[str]) -> dict[str, Mapping[str, Any] | EnvError]:
    out: dict[str, Mapping[str, Any] | EnvError] = {}
    for name in sorted(names):
        try:
            out[name] = await cache.get(ns, name)
        except EnvError as e:
            out[name] = e
    return out


def _from(objects: Mapping[str, Mapping[str, Any] | EnvError]) -> Callable[[str, str], Mapping[str, Any]]:
    def get(namespace: str, name: str) -> Mapping[str, Any]:
        obj = objects.get(name)
        if obj is None:
            raise EnvError(f'object "{namespace}"/"{name}" not registered')
        if isinstance(obj, EnvError):
            raise obj
        return obj
    return get

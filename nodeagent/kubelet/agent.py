"""The kubelet: registers the node and runs its pods through CRI (its component: `kubelet.service`).

Pod sources (the apiserver's pods bound to this node, via an informer) feed the pod workers, one task
per pod; the PLEG relists the runtime each second and wakes the workers of pods whose containers
changed (and the runtime's GetContainerEvents stream, when offered, wakes them at once on a stop); each sync
PATCHes the pod's status; a terminated pod is removed from the runtime and its API object confirmed deleted
(gracePeriodSeconds=0). Everything runs in one TaskGroup owned by `serve`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cri.client import RuntimeClient
from kernel.threads import run_to_completion
from nodeagent.api.times import parse_rfc3339
from nodeagent.client.events import EventRecorder
from nodeagent.client.informer import Informer, Subset, pods_on_node
from nodeagent.client.rest import Client, ClientError
from nodeagent.clock import REAL_CLOCK, Clock
from nodeagent.kubelet import admission, container_events, node_allocatable, node_status
from nodeagent.kubelet.cgroups import QOS_UPDATE_INTERVAL_S, update_qos_cgroups
from nodeagent.kubelet.config import KubeletConfig
from nodeagent.kubelet.cpumanager.cpuset import read_topology
from nodeagent.kubelet.cpumanager.manager import AllocationError, CPUManager
from nodeagent.kubelet.cpumanager.reconcile import CPUReconciler
from nodeagent.kubelet.envvars import EnvError, NotFound
from nodeagent.kubelet.eviction import EvictionManager
from nodeagent.kubelet.evictions import EvictionLoop
from nodeagent.kubelet.gc.containers import ContainerGC
from nodeagent.kubelet.gc.images import ImageGC
from nodeagent.kubelet.gc.loop import GarbageCollector
from nodeagent.kubelet.kuberuntime import PodRuntime, termination_grace, uid_of
from nodeagent.kubelet.labels import POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL
from nodeagent.kubelet.node import NodeAgent
from nodeagent.kubelet.pleg import EventType, GenericPLEG, Record
from nodeagent.kubelet.pluginmanager import PluginManager
from nodeagent.kubelet.pod_actions import latest_records
from nodeagent.kubelet.prober import ProbeManager, Prober, Result
from nodeagent.kubelet.secrets import PodObjects
from nodeagent.kubelet.server.metrics import KubeletMetrics
from nodeagent.kubelet.start_slots import StartSlots
from nodeagent.kubelet.static_pods import (
    StaticPodSource,
    URLPodSource,
    is_mirror_pod,
    is_static_pod,
    mirror_matches,
    mirror_pod,
)
from nodeagent.kubelet.status import KUBELET_CONDITIONS
from nodeagent.kubelet.status_manager import StatusManager
from nodeagent.kubelet.tokens import TokenError, TokenManager
from nodeagent.kubelet.volumes.csi import CSIPlugin, Drivers
from nodeagent.kubelet.volumes.csiprovisioner import CSIProvisioner
from nodeagent.kubelet.volumes.csisnapshotter import CSISnapshotter
from nodeagent.kubelet.volumes.flexvolume import DriverProber, FlexVolumePlugin
from nodeagent.kubelet.volumes.localpath import LocalPathProvisioner
from nodeagent.kubelet.volumes.manager import VolumeManager
from nodeagent.kubelet.volumes.payloads import VolumeSourceError
from nodeagent.kubelet.volumes.plugins import VolumePlugin
from nodeagent.kubelet.workers import PodWorkers

log = logging.getLogger("nodeagent.kubelet")

ORPHAN_GRACE = 2
HOUSEKEEPING_PERIOD = 2.0  # kubelet's housekeepingPeriod: HandlePodCleanups (orphaned pod dirs) this often


class Kubelet:
    def __init__(self, cfg: KubeletConfig, client: Client, cri: RuntimeClient,
                 clock: Clock | None = None, events_client: Client | None = None,
                 snapshot_client: Client | None = None) -> None:
        """`events_client`: where Events go (kubelet's separately limited eventClient); `client` when None.
        `snapshot_client`: the CSI snapshotter's (its own account); `client` when None."""
        self.cfg = cfg
        self.client = client
        self.cri = cri
        self.clock = clock or REAL_CLOCK
        self.recorder = EventRecorder(events_client or client, "kubelet", cfg.node_name)
        self.pleg = GenericPLEG(self.clock)
        self.eviction = EvictionManager(cfg.thresholds(), self.clock,
                                        pressure_transition_period=cfg.eviction_pressure_transition_period,
                                        max_pod_grace_period=cfg.eviction_max_pod_grace_period)
        system_reserved, kube_reserved = cfg.reserved()
        self.evicted: dict[str, dict[str, Any]] = {}  # uid → the Failed/Evicted status the pod keeps
        self.node = NodeAgent(client, cri, cfg.node_name, cfg.data_dir, self.pleg.healthy, self.clock,
                              eviction=self.eviction, addresses=[cfg.node_ip] if cfg.node_ip else None,
                              max_pods=cfg.pod_capacity(os.cpu_count() or 1),
                              lease_duration=cfg.node_lease_duration,
                              system_reserved=system_reserved, kube_reserved=kube_reserved)
        self.pods: Informer | Subset = pods_on_node(client, cfg.node_name) if cfg.shared_pod_cache \
            else Informer(client, "pods", field_selector=f"spec.nodeName={cfg.node_name}")
        self._unwatch_pods: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.tokens = TokenManager(client, self.clock)
        # CSI drivers: registered through <root>/plugins_registry, used by the CSI volume plugin and by
        # the external-provisioner pattern's adapter for their classes
        self.csi_drivers = Drivers()
        self.csi = CSIPlugin(cfg.root_dir, cfg.node_name, self.csi_drivers,
                             get_driver=self._api_getter("csidrivers"),
                             get_secret=self._api_getter("secrets"))
        self.csi_provisioner = CSIProvisioner(client, cfg.node_name, self.csi_drivers, self.recorder)
        self.csi_snapshotter = CSISnapshotter(snapshot_client or client, cfg.node_name, self.csi_drivers,
                                              self.recorder)
        self.plugins = PluginManager(client, cfg.node_name,
                                     cfg.plugin_registry_dir or str(Path(cfg.root_dir, "plugins_registry")),
                                     self.csi_drivers, self._csi_driver_changed)
        self.volumes = VolumeManager(cfg.root_dir, get_configmap=self._getter("configmaps"),
                                     get_secret=self._getter("secrets"),
                                     get_claim=self._api_getter("persistentvolumeclaims"),
                                     get_volume=self._api_getter("persistentvolumes"),
                                     get_token=self._get_token, plugins=self._volume_plugins(cfg))
        # Secrets/ConfigMaps by watch and Services by informer, for container environments and image pulls
        self.objects = PodObjects(client, host_ips=lambda: list(self.node.addresses),
                                  node_allocatable=self.node.allocatable)
        self.runtime: PodRuntime | None = None
        self.static: dict[str, dict[str, Any]] = {}  # uid → static pod from the manifest dir or URL
        self._static_by_source: dict[str, dict[str, dict[str, Any]]] = {}
        self.static_source = StaticPodSource(cfg.manifests_dir, cfg.node_name, self.clock)
        self.url_source = (URLPodSource(cfg.manifest_url, cfg.node_name, self.clock, cfg.http_check_frequency)
                           if cfg.manifest_url else None)
        self._tg: asyncio.TaskGroup | None = None
        self._last_relist_start: float | None = None
        self._relists = 0
        self._last_boxes: list[Any] | None = None  # the runtime's pod sandboxes at the last relist
        self._orphans_kept: dict[str, str] = {}  # orphaned pod dir -> why it stays (said once per reason)
        self.workers: PodWorkers | None = None
        # statuses are set by the pod workers and written by the status manager's own loop
        self.status = StatusManager(client, self.pods.get, self.clock)
        self.last_status: dict[str, dict[str, Any]] = self.status.statuses
        self.probes = ProbeManager(Prober(self._exec_sync, self._probe_event),
                                   self.last_status.get, self.clock)
        self.metrics = KubeletMetrics()
        self.starts = StartSlots(cfg.max_parallel_pod_starts)
        self.metrics.set_start_slots_source(lambda: self.starts.waiting)
        self.csi.observe = self.metrics.observe_csi
        self._running_counts: tuple[int, dict[str, int]] = (0, {})
        self.metrics.set_running_source(lambda: self._running_counts)
        self.metrics.set_volume_source(self._claim_stats)
        self._first_seen: dict[str, float] = {}  # uid → monotonic time a pending pod was first synced
        self.api: Any = None
        self.cpu: CPUManager | None = None  # made at run (reads sysfs and its checkpoint)
        containers_gc = ContainerGC(cri, cfg.container_gc_policy(), self.clock, self._known_pods)
        self.gc = GarbageCollector(containers_gc, ImageGC(cri, cfg.image_gc_policy(), self.clock),
                                   self.recorder, cfg.node_name, self.clock, cfg.container_gc_period,
                                   cfg.image_gc_period)
        self.cpu_reconciler: CPUReconciler | None = None

    def _volume_plugins(self, cfg: KubeletConfig) -> dict[str, VolumePlugin]:
        """The delegated volume plugins by source key. FlexVolume: drivers from --volume-plugin-dir; a
        secretRef is read from the API (its type must name the driver), as kubelet's GetSecretForPV does.
        CSI: the drivers registered through the plugin manager."""
        plugins: dict[str, VolumePlugin] = {}
        if cfg.volume_plugin_dir:
            plugins["flexVolume"] = FlexVolumePlugin(DriverProber(cfg.volume_plugin_dir), cfg.root_dir,
                                                     cfg.node_name, get_secret=self._api_getter("secrets"))
        plugins["csi"] = self.csi
        return plugins

    def _csi_driver_changed(self, name: str) -> None:
        """A CSI driver registered or left: its capabilities are asked again, its claims looked at again."""
        self.csi.forget(name)
        self.csi_provisioner.poke_all()
        self.csi_snapshotter.poke_all()

    async def _exec_sync(self, container_id: str, cmd: Any, seconds: float) -> tuple[int, bytes, bytes]:
        r = await self.cri.exec_sync(container_id.split("://", 1)[-1], list(cmd), int(seconds))
        return r.exit_code, r.stdout, r.stderr

    def _poke_all(self, uids: set[str]) -> None:
        if self.workers is not None:
            for uid in uids:
                self.workers.poke(uid)

    def _probe_event(self, pod: Any, container: Any, type_: str, reason: str, message: str) -> None:
        self.recorder.record(pod, type_, reason, message)

    async def _probe_updates(self) -> None:
        """A probe result changed: resync that pod now (restart on liveness failure, flip Ready)."""
        assert self.workers is not None
        queues = (self.probes.liveness.updates, self.probes.readiness.updates, self.probes.startup.updates)
        while True:
            getters = [asyncio.ensure_future(q.get()) for q in queues]
            try:
                done, _ = await asyncio.wait(getters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for g in getters:
                    if not g.done():
                        g.cancel()
            for g in done:
                self.workers.poke(g.result().pod_uid)

    def _get_token(self, pod: Mapping[str, Any], audience: str, expiration: int) -> str:
        """The blocking token getter the projected volume plugin calls from its thread."""
        assert self._loop is not None
        fut = asyncio.run_coroutine_threadsafe(self.tokens.get(pod, audience, expiration), self._loop)
        try:
            return fut.result(timeout=30)
        except TokenError as e:
            raise VolumeSourceError(str(e)) from None

    def _getter(self, resource: str) -> Callable[[str, str], dict[str, Any] | None]:
        """A blocking (namespace, name) → object getter for the volume plugins, which run in a thread; it
        reads the watch of the object (registered with the pod before its volumes are set up)."""
        def get(namespace: str, name: str) -> dict[str, Any] | None:
            assert self._loop is not None
            cache = self.objects.secrets if resource == "secrets" else self.objects.configmaps
            fut = asyncio.run_coroutine_threadsafe(cache.get(namespace, name), self._loop)
            try:
                return fut.result(timeout=30)
            except NotFound:
                return None
            except EnvError as e:
                raise VolumeSourceError(str(e)) from None
        return get

    def _api_getter(self, resource: str) -> Callable[[str, str], dict[str, Any] | None]:
        """A blocking (namespace, name) → object getter reading the API itself, for claims and volumes: the
        kubelet's desired-state populator GETs them each time a pod's volumes are set up."""
        def get(namespace: str, name: str) -> dict[str, Any] | None:
            assert self._loop is not None
            call = self.client.get(resource, name, namespace or None)
            fut = asyncio.run_coroutine_threadsafe(call, self._loop)
            try:
                return fut.result(timeout=30)
            except ClientError as e:
                if e.not_found:
                    return None
                raise VolumeSourceError(f"{resource} {namespace}/{name}: {e.message}") from None
        return get

    async def run(self, ready: asyncio.Event) -> None:
        self._loop = asyncio.get_running_loop()
        for d in (self.cfg.log_dir, self.cfg.manifests_dir):
            await asyncio.to_thread(Path(d).mkdir, parents=True, exist_ok=True)
        await self._start_cpu_manager()
        await self._wait_runtime()
        await self._start_api()
        try:
            await self._run_node(ready)
        finally:
            if self._unwatch_pods is not None:  # a shared cache lives on for the others
                self._unwatch_pods()
            if self.api is not None:
                await self.api.stop()

    async def _start_cpu_manager(self) -> None:
        """The CPU manager's checkpoint is restored before any pod is admitted; a checkpoint of another
        policy stops the kubelet with kubelet's message (CPUManagerError)."""
        topology = await asyncio.to_thread(read_topology)
        self.cpu = CPUManager(self.cfg.cpu_manager_policy, self.cfg.root_dir, topology,
                              self.cfg.reserved_cpu_set())
        await asyncio.to_thread(self.cpu.start)
        self.cpu_reconciler = CPUReconciler(self.cpu, self.cri, self.clock, self._cpu_pods,
                                            self.cfg.cpu_manager_reconcile_period)
        log.info("CPU manager: policy %s, reserved CPUs %r, default set %r", self.cpu.policy,
                 self.cfg.reserved_cpus, self.cpu.checkpoint().default_cpu_set)

    def _known_pods(self) -> list[dict[str, Any]]:
        """Every pod this kubelet has a source for (API pods bound here, static pods), any phase."""
        return [p for p in self.pods.list() if not is_mirror_pod(p)] + list(self.static.values())

    def _cpu_pods(self) -> list[dict[str, Any]]:
        """The pods that hold their CPUs: not terminal, not evicted (terminating ones until they stop)."""
        pods = [p for p in self.pods.list() if not is_mirror_pod(p)] + list(self.static.values())
        return [p for p in pods if uid_of(p) not in self.evicted
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]

    async def _start_api(self) -> None:
        """The Node API listens before the node registers, so its port is in the first status."""
        from nodeagent.kubelet import server

        deps = server.ServerDeps(self.cfg.node_name, self.cri, self.api_pods, self.metrics, self.cfg.root_dir,
                                 self.cfg.log_dir, self.clock,
                                 cgroup_root=tuple(p for p in self.cfg.cgroup_root.split("/") if p),
                                 volume_stats=self.volumes.volume_stats)
        self.api = await server.start(deps, self.client, self.cfg.data_dir,
                                      str(Path(self.cfg.root_dir, "pki")), self.cfg.address, self.cfg.port,
                                      self.node.addresses)
        self.node.kubelet_port = self.api.port

    def _claim_stats(self) -> list[tuple[str, str, dict[str, int]]]:
        """The claims' volume stats of the pods running here (blocking: read at scrape, in a thread)."""
        for _ in range(3):  # the caches change under this thread now and then: take the list again
            try:
                pods = [p for p in self.pods.list() if not is_mirror_pod(p)] + list(self.static.values())
                break
            except RuntimeError:
                continue
        else:
            return []
        return [(pvc[0], pvc[1], st) for p in pods for _, st, pvc in self.volumes.volume_stats(p)
                if pvc is not None]

    def api_pods(self) -> list[dict[str, Any]]:
        """The pods this kubelet runs (API pods bound here and static pods), with its latest status of
        each."""
        from nodeagent.kubelet.server.app import pod_list_item

        pods = [p for p in self.pods.list() if not is_mirror_pod(p)] + list(self.static.values())
        return [pod_list_item(p, self.last_status.get(uid_of(p))) for p in pods]

    async def _run_node(self, ready: asyncio.Event) -> None:
        await self.node.register()
        self.runtime = PodRuntime(self.cri, self.volumes, self.recorder, self.clock,
                                  log_root=Path(self.cfg.log_dir),
                                  cgroup_root=tuple(p for p in self.cfg.cgroup_root.split("/") if p),
                                  memory_capacity=self.node.memory_capacity(),
                                  runtime_name=self.node.runtime_name,
                                  cgroups=await asyncio.to_thread(_cgroup_driver),
                                  cluster_dns=self.cfg.cluster_dns, cluster_domain=self.cfg.cluster_domain,
                                  resolv_conf=self.cfg.resolv_conf, sources=self.objects,
                                  runtime_handler=self._runtime_handler,
                                  cpuset_of=self.cpu.cpuset if self.cpu is not None else None,
                                  on_created=self.cpu_reconciler.created
                                  if self.cpu_reconciler is not None else None,
                                  active_pods=self._active_pods, starts=self.starts)
        if self.runtime.cgroups is not None:
            await asyncio.to_thread(_ensure_qos_tree, self.runtime.cgroups, self.runtime.cgroup_root)
            system_reserved, kube_reserved = self.cfg.reserved()
            await asyncio.to_thread(node_allocatable.enforce, self.runtime.cgroups,
                                    self.runtime.cgroup_root, self.node.capacity,
                                    self.cfg.enforce_node_allocatable, system_reserved, kube_reserved,
                                    self.cfg.system_reserved_cgroup, self.cfg.kube_reserved_cgroup)
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            self.workers = PodWorkers(tg, self._sync_pod, self._terminate_pod, self.clock,
                                      resync=self.cfg.resync)
            tg.create_task(self.recorder.run(), name="kubelet-events")
            tg.create_task(self.status.run(), name="kubelet-status-manager")
            tg.create_task(self.node.run(), name="kubelet-node")
            tg.create_task(self.probes.run(), name="kubelet-probes")
            objects_ready = asyncio.Event()
            # a Secret or ConfigMap a pod waits for (or projects) changed: sync those pods now
            self.objects.secrets.on_change = self.objects.configmaps.on_change = self._poke_all
            tg.create_task(self.objects.run(objects_ready), name="kubelet-pod-objects")
            await objects_ready.wait()
            await self.probes.wait_ready()
            tg.create_task(self._probe_updates(), name="kubelet-probe-updates")
            self._unwatch_pods = self.pods.add_handler(self._on_pod, self._on_pod_update,
                                                       self._on_pod_deleted)
            tg.create_task(self.pods.run(client=self.client), name="kubelet-pods")
            await self.pods.wait_synced()
            tg.create_task(self.static_source.run(self._on_static_pods), name="kubelet-static-pods")
            if self.url_source is not None:
                tg.create_task(self.url_source.run(functools.partial(self._on_static_pods, source="http")),
                               name="kubelet-manifest-url")
            tg.create_task(self._pleg_loop(), name="kubelet-pleg")
            tg.create_task(self._housekeeping_loop(), name="kubelet-housekeeping")
            tg.create_task(container_events.follow(self.cri.get_container_events, self.workers.poke),
                           name="kubelet-container-events")
            loop = EvictionLoop(self.eviction, self.clock, self.cfg.data_dir, self._active_pods,
                                self.runtime.cgroup_parent, self._evict, self.recorder,
                                self.cfg.housekeeping_interval, reclaim_disk=self.gc.reclaim_disk,
                                cri=self.cri, log_dir_of=self.runtime.pod_log_dir,
                                volumes_dir_of=lambda p: self.volumes.pod_dir(uid_of(p)) / "volumes",
                                cleaned=lambda p: not self.volumes.pod_dir(uid_of(p)).exists())
            tg.create_task(self.gc.run_containers(), name="kubelet-container-gc")
            tg.create_task(self.gc.run_images(), name="kubelet-image-gc")
            tg.create_task(loop.run(), name="kubelet-eviction")
            if self.cpu_reconciler is not None:
                tg.create_task(self.cpu_reconciler.run(), name="kubelet-cpu-manager")
            if self.runtime.cgroups is not None:
                tg.create_task(self._qos_cgroups_loop(), name="kubelet-qos-cgroups")
            if self.cfg.local_path_dir:
                provisioner = LocalPathProvisioner(self.client, self.cfg.node_name, self.cfg.local_path_dir,
                                                   self.recorder)
                tg.create_task(provisioner.run(), name="kubelet-local-path")
            tg.create_task(self.plugins.run(), name="kubelet-plugin-manager")
            tg.create_task(self.csi_provisioner.run(), name="kubelet-csi-provisioner")
            tg.create_task(self.csi_snapshotter.run(), name="kubelet-csi-snapshotter")
            log.info("kubelet for node %s running (runtime %s %s at %s)", self.cfg.node_name,
                     self.node.runtime_name, self.node.runtime_version, self.cfg.runtime_endpoint)
            ready.set()

    async def _wait_runtime(self) -> None:
        delay = 0.1
        while True:
            try:
                await self.cri.version()
                return
            except Exception as e:
                log.info("waiting for the runtime at %s: %s", self.cfg.runtime_endpoint, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    # -- sources -----------------------------------------------------------------------------------
    def _on_pod(self, pod: dict[str, Any]) -> None:
        assert self.workers is not None and self._tg is not None
        if is_mirror_pod(pod):
            # A mirror only shows a static pod; deleting it is confirmed at once and the static pod's
            # next sync publishes a new one.
            if pod["metadata"].get("deletionTimestamp"):
                self._tg.create_task(self._delete_now(pod))
            return
        self.workers.update(pod)

    def _on_pod_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        if is_mirror_pod(new) or _desired_changed(old, new):
            self._on_pod(new)
        else:
            assert self.workers is not None
            self.workers.update(new, wake=False)  # a status write (ours) came back: nothing to sync

    def _on_pod_deleted(self, pod: dict[str, Any]) -> None:
        assert self.workers is not None
        if is_mirror_pod(pod):
            for uid, static in self.static.items():
                if static["metadata"]["name"] == pod["metadata"]["name"]:
                    self.workers.poke(uid)
            return
        self.workers.remove(pod)

    def _on_static_pods(self, pods: list[dict[str, Any]], source: str = "file") -> None:
        """A static source changed (the manifest dir, or the manifest URL): start new/changed static pods,
        terminate the ones that left every source."""
        assert self.workers is not None
        self._static_by_source[source] = {uid_of(p): p for p in pods}
        new = {uid: p for by_uid in self._static_by_source.values() for uid, p in by_uid.items()}
        for uid, old in self.static.items():
            if uid not in new:
                self.workers.remove(old)
        self.static = new
        for p in pods:
            self.workers.update(p)

    async def _delete_now(self, pod: dict[str, Any]) -> None:
        m = pod["metadata"]
        with contextlib.suppress(ClientError):
            await self.client.delete("pods", m["name"], m.get("namespace"), grace_period=0,
                                     preconditions={"uid": m["uid"]})

    async def _sync_mirror(self, pod: dict[str, Any]) -> None:
        """Publish (or replace an outdated) mirror pod for a static pod."""
        m = pod["metadata"]
        cur = self.pods.get(m["name"], m.get("namespace"))
        if cur is not None and is_mirror_pod(cur) and mirror_matches(pod, cur):
            return
        if cur is not None:
            if not is_mirror_pod(cur):
                return  # an API pod of that name exists: not ours to replace
            await self._delete_now(cur)
        try:
            await self.client.create("pods", mirror_pod(pod, self.cfg.node_name, self.node.uid))
        except ClientError as e:
            if not e.already_exists:  # kubelet logs a failed create and tries at the next sync
                log.warning("static pod %s/%s: cannot create its mirror pod: %s", m.get("namespace"),
                            m["name"], e)

    # -- PLEG ----------------------------------------------------------------------------------------
    async def _pleg_loop(self) -> None:
        assert self.workers is not None
        while True:
            started = time.monotonic()
            if self._last_relist_start is not None:
                self.metrics.pleg_interval.observe(started - self._last_relist_start)
            self._last_relist_start = started
            try:
                boxes = await self.cri.list_pod_sandbox()
                ctrs = await self.cri.list_containers()
            except Exception as e:
                log.warning("PLEG relist failed: %s", e)
            else:
                self.metrics.pleg_relist.observe(time.monotonic() - started)
                self.metrics.pleg_last_seen.set(self.clock.now())
                self._count_running(boxes, ctrs)
                records = [Record(s.labels.get(POD_UID_LABEL, ""), s.id, _state_name(s.state, sandbox=True))
                           for s in boxes if s.labels.get(POD_UID_LABEL)]
                records += [Record(c.labels.get(POD_UID_LABEL, ""), c.id, _state_name(c.state))
                            for c in ctrs if c.labels.get(POD_UID_LABEL)]
                for ev in self.pleg.relist(records):
                    if ev.type == EventType.CONTAINER_STARTED:
                        self.metrics.started_containers.labels("container").inc()
                    self.workers.poke(ev.pod_uid)
                self._adopt_orphans(boxes)
                self._relists += 1
                self._last_boxes = boxes
            await self.clock.sleep(1.0)

    def _count_running(self, boxes: list[Any], ctrs: list[Any]) -> None:
        """kubelet_running_pods / kubelet_running_containers, from the last relist."""
        from cri.proto import api_pb2 as pb

        pods = sum(1 for s in boxes if s.state == pb.SANDBOX_READY and s.labels.get(POD_UID_LABEL))
        states: dict[str, int] = {}
        for c in ctrs:
            if c.labels.get(POD_UID_LABEL):
                name = pb.ContainerState.Name(c.state).removeprefix("CONTAINER_").lower()
                states[name] = states.get(name, 0) + 1
        self._running_counts = (pods, states)

    def _adopt_orphans(self, boxes: list[Any]) -> None:
        """Runtime pods no source wants (deleted while the agent was down) are terminated."""
        assert self.workers is not None
        wanted = {uid_of(p) for p in self.pods.list()} | set(self.static)
        for s in boxes:
            uid = s.labels.get(POD_UID_LABEL)
            if not uid or uid in wanted or uid in self.workers.known() or uid in self.workers.finished:
                continue
            log.info("terminating orphaned pod %s/%s (%s)", s.labels.get(POD_NAMESPACE_LABEL),
                     s.labels.get(POD_NAME_LABEL), uid)
            self.workers.remove({"metadata": {"uid": uid, "name": s.labels.get(POD_NAME_LABEL, ""),
                                              "namespace": s.labels.get(POD_NAMESPACE_LABEL, "default")},
                                 "spec": {"terminationGracePeriodSeconds": ORPHAN_GRACE}})

    def _sources_ready(self) -> bool:
        """kubelet's sourcesReady.AllReady: every pod source (the API, the manifest dir, the manifest URL)
        has delivered its pods once; until then a pod dir may be a pod not heard of yet."""
        return self.pods.synced.is_set() and "file" in self._static_by_source and \
            (self.url_source is None or "http" in self._static_by_source)

    async def _housekeeping_loop(self) -> None:
        """kubelet's housekeeping tick (syncLoop's every `housekeepingPeriod`, 2 s; skipped until the
        sources are ready): HandlePodCleanups' orphaned pod directories."""
        while True:
            await self.clock.sleep(HOUSEKEEPING_PERIOD)
            if self._last_boxes is None or not self._sources_ready():
                continue
            try:
                await self._cleanup_orphaned_pod_dirs(self._last_boxes)
            except Exception as e:  # the next tick tries again, as kubelet's
                log.warning("housekeeping: cleaning up orphaned pod directories failed: %s", e)

    async def _cleanup_orphaned_pod_dirs(self, boxes: list[Any]) -> None:
        """kubelet's cleanupOrphanedPodDirs: the dirs of pods no source, worker or runtime pod accounts for
        (deleted while the kubelet was down, or left when a teardown failed) go once their volumes are
        unmounted (`VolumeManager.remove_orphaned_pod_dir`); one that stays is logged with why, once per
        reason (kubelet says it at every tick: "Orphaned pod found, but volumes are not cleaned up")."""
        assert self.workers is not None
        wanted = {uid_of(p) for p in self.pods.list()} | set(self.static) | self.workers.known()
        wanted |= {s.labels.get(POD_UID_LABEL, "") for s in boxes}
        on_disk = await asyncio.to_thread(self.volumes.pod_uids_on_disk)
        for uid in set(self._orphans_kept) - set(on_disk):
            del self._orphans_kept[uid]
        for uid in on_disk:
            if uid in wanted or uid in self.workers.known():
                continue
            try:
                why = await run_to_completion(self.volumes.remove_orphaned_pod_dir, uid)
            except OSError as e:
                why = str(e)
            if why is None:
                self._orphans_kept.pop(uid, None)
                log.info("removed the directory of orphaned pod %s", uid)
            elif self._orphans_kept.get(uid) != why:
                self._orphans_kept[uid] = why
                log.warning("orphaned pod %s found, but its directory stays: %s", uid, why)

    async def _qos_cgroups_loop(self) -> None:
        """qosContainerManager's periodic UpdateCgroups: the burstable cgroup's shares follow its pods
        as they come and go (a new pod's sync updates them before its own cgroup is made)."""
        assert self.runtime is not None
        while True:
            await self.clock.sleep(QOS_UPDATE_INTERVAL_S)
            try:
                await asyncio.to_thread(update_qos_cgroups, self.runtime.cgroups, self.runtime.cgroup_root,
                                        self._active_pods())
            except OSError as e:
                log.warning("updating the QoS cgroups failed (retried in %.0fs): %s",
                            QOS_UPDATE_INTERVAL_S, e)

    # -- eviction ----------------------------------------------------------------------------------
    def _active_pods(self) -> list[dict[str, Any]]:
        """Pods that run here now (not terminal, not terminating, not already evicted)."""
        assert self.workers is not None
        pods = [p for p in self.pods.list() if not is_mirror_pod(p)] + list(self.static.values())
        return [p for p in pods if uid_of(p) in self.workers.known() and uid_of(p) not in self.evicted
                and not self.workers.is_terminating(uid_of(p)) and not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]

    async def _evict(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        """Failed/Evicted from now on: the worker stops the containers and keeps reporting this status."""
        assert self.workers is not None
        self.evicted[uid_of(pod)] = status
        self.workers.poke(uid_of(pod))

    async def _runtime_handler(self, pod: Any) -> str:
        """The CRI handler of the pod's RuntimeClass (node.k8s.io/v1), "" without one; LookupError when the
        class is gone (kubelet's runtimeClassManager.LookupRuntimeHandler)."""
        name = (pod.get("spec") or {}).get("runtimeClassName")
        if not name:
            return ""
        try:
            rc = await self.client.get("runtimeclasses", name)
        except ClientError as e:
            if e.not_found:
                raise LookupError(f'RuntimeClass "{name}" not found') from None
            raise
        return str(rc.get("handler", ""))

    async def _kubelet_failure(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """A pod the kubelet fails itself: refused at admission (new pods only) or past its
        activeDeadlineSeconds; the status it keeps from then on, after an event saying why."""
        uid = uid_of(pod)
        status = pod.get("status") or {}
        if uid not in self.last_status and not status.get("startTime") \
                and status.get("phase") in (None, "Pending"):
            rejected = admission.admit(pod, self.cfg.allowed_unsafe_sysctls)
            if rejected is None:
                pressure = self.eviction.admit(pod)
                if pressure is not None:
                    rejected = admission.Rejection("Evicted", pressure)
            if rejected is None:
                rejected = await self._admit_resources(pod)
            if rejected is not None:
                self.recorder.record(pod, "Warning", rejected.reason, rejected.message)
                return rejected.status()
        if admission.deadline_exceeded(pod, self.last_status.get(uid), self.clock.now()):
            # A Normal event, as the kubelet's activeDeadlineHandler records it.
            self.recorder.record(pod, "Normal", admission.DEADLINE_REASON, admission.DEADLINE_MESSAGE)
            return admission.deadline_status()
        return None

    async def _admit_resources(self, pod: dict[str, Any]) -> admission.Rejection | None:
        """The pods capacity, then the CPU manager's allocation (kubelet's resource admission handlers)."""
        others = [p for p in self._cpu_pods() if uid_of(p) != uid_of(pod) and uid_of(p) in self.last_status]
        rejected = admission.pods_capacity(len(others), int(self.node.capacity.get("pods", 0) or 0))
        if rejected is not None or self.cpu is None:
            return rejected
        try:
            changed = await asyncio.to_thread(self.cpu.allocate, pod)
        except AllocationError as e:
            return admission.Rejection("UnexpectedAdmissionError",
                                       f"Allocate failed due to {e}, which is unexpected")
        if changed and self.cpu_reconciler is not None:
            self.cpu_reconciler.poke()  # the default set shrank: the other containers follow now
        return None

    # -- the workers' work -----------------------------------------------------------------------------
    async def _sync_pod(self, pod: dict[str, Any]) -> float | None:
        assert self.runtime is not None
        terminal = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if uid_of(pod) not in self.evicted and not terminal:
            failed = await self._kubelet_failure(pod)
            if failed is not None:
                self.evicted[uid_of(pod)] = failed
        evicted = self.evicted.get(uid_of(pod))
        if evicted is not None:
            await self.runtime.kill_containers(pod, grace=0)
            # An evicted pod's volumes go now (its emptyDirs are what a disk eviction reclaims); the object
            # stays Failed until it is deleted.
            await run_to_completion(self.volumes.teardown_pod, uid_of(pod))
            self._post_status(pod, evicted)
            return None
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            await self.runtime.kill_containers(pod)  # terminal: nothing runs, the object stays
            return None
        if phase in (None, "Pending") and uid_of(pod) not in self.last_status:
            self._first_seen.setdefault(uid_of(pod), time.monotonic())
        self.probes.add_pod(pod)
        self.probes.update_pod(pod)
        self.objects.register(pod)
        liveness_failed, startup_failed = set(), set()
        for c in (self.last_status.get(uid_of(pod)) or {}).get("containerStatuses") or []:
            cid = c.get("containerID")
            if cid and self.probes.liveness.get(cid) == Result.FAILURE:
                liveness_failed.add(cid)
            if cid and self.probes.startup.get(cid) == Result.FAILURE:
                startup_failed.add(cid)
        if is_static_pod(pod):
            await self._sync_mirror(pod)
        if not (pod.get("spec") or {}).get("hostNetwork"):
            # kubelet's SyncPod: a pod on the pod network waits until the runtime's network is ready (no CNI
            # config yet: the node's podCIDR not assigned); its Pending status is posted meanwhile.
            net_errors = await self.node.network_errors()
            if net_errors:
                self.recorder.record(pod, "Warning", "NetworkNotReady",
                                     f"network is not ready: {node_status.aggregate(net_errors)}")
                st = await self.runtime.state(pod)
                base = _with_own_status(pod, self.status.get(uid_of(pod)))
                self._post_status(pod, self.runtime.pod_status(base, st, self.node.addresses))
                return 1.0
        st = await self.runtime.sync(pod, liveness_failed, startup_failed)
        latest = latest_records(st.records)
        started, ready = self.probes.started_and_ready(
            pod, {n: r.container_id for n, r in latest.items()},
            {n: r.state == "running" for n, r in latest.items()})
        status = self.runtime.pod_status(_with_own_status(pod, self.status.get(uid_of(pod))), st,
                                         self.node.addresses, ready=ready, started=started)
        self._post_status(pod, status)
        seen = self._first_seen.get(uid_of(pod))
        if seen is not None and status.get("phase") in ("Running", "Succeeded", "Failed"):
            del self._first_seen[uid_of(pod)]
            if status.get("phase") == "Running":
                self.metrics.pod_start.observe(time.monotonic() - seen)
        if status.get("phase") in ("Succeeded", "Failed"):
            return 0.0  # stop what is left at once
        waiting = [c for c in status.get("initContainerStatuses", []) + status.get("containerStatuses", [])
                   if "running" not in (c.get("state") or {})]
        deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        if deadline is not None and status.get("startTime"):  # wake when the deadline passes
            left = max(0.0, parse_rfc3339(status["startTime"]) + int(deadline) - self.clock.now()) + 0.05
            return min(left, 1.0) if waiting else left
        return 1.0 if waiting else None

    def _post_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        """The pod's new status, written by the status manager (a static pod's to its mirror pod)."""
        self.status.set(pod, status, mirror=is_static_pod(pod))

    async def _terminate_pod(self, pod: dict[str, Any]) -> None:
        assert self.runtime is not None
        self.probes.remove_pod(uid_of(pod))
        self.objects.unregister(uid_of(pod))
        self.tokens.forget(uid_of(pod))
        self.evicted.pop(uid_of(pod), None)
        self._first_seen.pop(uid_of(pod), None)
        await self.runtime.kill(pod, termination_grace(pod))
        if self.cpu is not None and await asyncio.to_thread(self.cpu.remove_pods, [uid_of(pod)]):
            if self.cpu_reconciler is not None:
                self.cpu_reconciler.poke()
        self.status.forget(uid_of(pod))
        m = pod["metadata"]
        cur = self.pods.get(m["name"], m.get("namespace"))
        if is_static_pod(pod):
            if cur is not None and is_mirror_pod(cur):
                await self._delete_now(cur)
            return
        if not m.get("deletionTimestamp"):
            return
        if cur is None or uid_of(cur) != uid_of(pod):
            return
        with contextlib.suppress(ClientError):
            await self.client.delete("pods", m["name"], m.get("namespace"), grace_period=0,
                                     preconditions={"uid": uid_of(pod)})


_VOLATILE_META = ("resourceVersion", "managedFields", "generation")


def _with_own_status(pod: dict[str, Any], own: dict[str, Any] | None) -> dict[str, Any]:
    """The pod with the kubelet's own last status as the base of the next one (kubelet's
    generateAPIPodStatus reads the status manager's, not the API's, which may not show our last write yet),
    but with the conditions other writers own (readiness gates, DisruptionTarget) as the API has them."""
    if own is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return pod  # a phase terminal in the API stays (kubelet forces an illegal transition back)
    api = (pod.get("status") or {}).get("conditions") or []
    conds = [c for c in own.get("conditions") or [] if c.get("type") in KUBELET_CONDITIONS]
    conds += [c for c in api if c.get("type") not in KUBELET_CONDITIONS]
    return {**pod, "status": {**own, "conditions": conds}}


def _desired_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether anything but the status (and bookkeeping metadata) changed between two versions of a pod."""
    if old.get("spec") != new.get("spec"):
        return True
    om = {k: v for k, v in (old.get("metadata") or {}).items() if k not in _VOLATILE_META}
    nm = {k: v for k, v in (new.get("metadata") or {}).items() if k not in _VOLATILE_META}
    return om != nm


def _ensure_qos_tree(driver: Any, cgroup_root: tuple[str, ...]) -> None:
    """kubepods and its burstable/besteffort children exist before any pod (as the kubelet's QoS container
    manager makes them), so pods never race to create their shared parents."""
    from nodeagent.kubelet import resources

    for qos in ("Burstable", "BestEffort"):
        driver.create(resources.qos_cgroup(qos, cgroup_root).cgroupfs())


def _cgroup_driver() -> Any:
    """The runtime's one cgroup driver (v1 or v2 by detection), or None where cgroups are unavailable."""
    try:
        from kernel.cgroups import detect

        return detect()
    except Exception as e:
        log.warning("no cgroup driver: %s", e)
        return None


def _state_name(state: int, sandbox: bool = False) -> str:
    from cri.proto import api_pb2 as pb

    if sandbox:
        return pb.PodSandboxState.Name(state)
    return pb.ContainerState.Name(state)

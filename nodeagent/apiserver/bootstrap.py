"""The bootstrap controller: system namespaces, system PriorityClasses, and the `kubernetes` Service and
Endpoints in `default`, created at start and repaired when deleted or changed (the seed's behaviour)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import uuid
from typing import Any

from nodeagent.api import kube_dns
from nodeagent.api.resources import RESOURCES, VIRTUAL, builtin, stored_resources
from nodeagent.api.times import now_rfc3339, parse_time
from nodeagent.apiserver import admission
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.peers import PeerLeases, endpoint_subsets
from nodeagent.apiserver.registry import NAMESPACES, PRIORITY_CLASSES, SERVICES, Registry
from nodeagent.clock import REAL_CLOCK, Clock, utcnow
from nodeagent.store import base as store_base

log = logging.getLogger("nodeagent.apiserver.bootstrap")
ENDPOINTS = builtin("", "v1", "endpoints")
ENDPOINT_SLICES = builtin("discovery.k8s.io", "v1", "endpointslices")
EVENTS = builtin("", "v1", "events")
EVENTS_V1 = builtin("events.k8s.io", "v1", "events")
EVENT_TTL = 3600.0
QUOTAS = builtin("", "v1", "resourcequotas")
CONFIGMAPS = builtin("", "v1", "configmaps")
SERVICE_ACCOUNTS = builtin("", "v1", "serviceaccounts")
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
APISERVICES = builtin("apiregistration.k8s.io", "v1", "apiservices")
STORAGE_CLASSES = builtin("storage.k8s.io", "v1", "storageclasses")
# k3s's provisioner name, so manifests and StorageClasses written for k3s (the usual lab cluster) work
# unchanged; the node-side provisioner implements that provisioner's behaviour (see kubelet/volumes/localpath)
LOCAL_PATH_PROVISIONER = "rancher.io/local-path"


def default_storage_class() -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "local-path",
                         "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": LOCAL_PATH_PROVISIONER, "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": True}


CSI_DRIVERS = builtin("storage.k8s.io", "v1", "csidrivers")
# the CSI driver every node runs (`nodeagent csi`, csi.config.DRIVER_NAME)
CSI_HOSTPATH_DRIVER = "hostpath.csi.nodeagent.io"


def csi_hostpath_class() -> dict[str, Any]:
    """`csi-hostpath`: volumes made by the CSI driver through the external-provisioner pattern, on the node
    the first consumer is scheduled to (the driver's volumes are local to a node)."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "csi-hostpath"},
            "provisioner": CSI_HOSTPATH_DRIVER, "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": True}


def csi_hostpath_driver() -> dict[str, Any]:
    """The driver's CSIDriver, as csi-driver-host-path's deployment has it: nothing to attach (no
    VolumeAttachment, ControllerPublish is not offered), pod info on mount, persistent and inline ephemeral
    volumes, fsGroup applied by the kubelet to every volume (File)."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": CSI_HOSTPATH_DRIVER},
            "spec": {"attachRequired": False, "podInfoOnMount": True,
                     "volumeLifecycleModes": ["Persistent", "Ephemeral"], "fsGroupPolicy": "File",
                     "storageCapacity": False, "requiresRepublish": False}}


class Bootstrap:
    def __init__(self, registry: Registry, ip: str, port: int, peers: PeerLeases | None = None,
                 ca_pem: str | None = None, clock: Clock = REAL_CLOCK,
                 dns: kube_dns.DNSAddon | None = None) -> None:
        self.registry = registry
        self.dns = dns
        self.clock = clock
        self.ip = ip
        self.port = port
        self.peers = peers
        self.ca_pem = ca_pem
        self._last_expiry = 0.0

    async def ensure(self) -> None:
        reg = self.registry
        for ns in SYSTEM_NAMESPACES:
            await self._ensure_created(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": ns}})
            await reg._ensure_default_sa(ns)
        for name, value, desc in (("system-node-critical", 2000001000,
                                   "Used for system critical pods that must not "
                                   "be moved from their current node."),
                                  ("system-cluster-critical", 2000000000,
                                   "Used for system critical pods that must "
                                   "run in the cluster, but can be moved to another node if necessary.")):
            await self._ensure_created(PRIORITY_CLASSES, None, {
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value, "description": desc, "preemptionPolicy": "PreemptLowerPriority"})
        await self._ensure_kubernetes_service()
        await self._ensure_endpoints()
        await self._ensure_apiservices()
        if self.ca_pem:
            await self._publish_root_ca()
        if self.dns is not None:
            await self._ensure_dns_addon(self.dns)

    async def _ensure_dns_addon(self, dns: kube_dns.DNSAddon) -> None:
        """kubeadm's CoreDNS addon objects, written by the installer so the DNS server only reads: the
        kube-dns Service (kept as found once it exists: its ClusterIP is immutable), the `coredns`
        ServiceAccount, and the EndpointSlice to where the server answers, brought back on every pass."""
        ns = kube_dns.NAMESPACE
        await self._ensure_created(SERVICE_ACCOUNTS, ns, kube_dns.dns_service_account())
        await self._ensure_created(SERVICES, ns, kube_dns.dns_service(dns.cluster_ip))
        want = kube_dns.dns_endpoint_slice(dns.endpoint_ip, dns.port)
        fields = {k: want.pop(k) for k in ("addressType", "endpoints", "ports")}
        await self._upsert(ENDPOINT_SLICES.key(ns, want["metadata"]["name"]), want, fields)

    async def _publish_root_ca(self) -> None:
        """The `kube-root-ca.crt` ConfigMap in every namespace (the root CA publisher's job)."""
        store = self.registry.store
        namespaces, _ = await store.list(NAMESPACES.key_prefix())
        for ns in namespaces:
            name = ns["metadata"]["name"]
            if ns["metadata"].get("deletionTimestamp"):
                continue
            key = CONFIGMAPS.key(name, "kube-root-ca.crt")
            try:
                cm = await store.get(key)
                if (cm.get("data") or {}).get("ca.crt") == self.ca_pem:
                    continue
                cm["data"] = {"ca.crt": self.ca_pem}
                await store.update(key, cm, int(cm["metadata"]["resourceVersion"]))
            except store_base.NotFound:
                try:
                    await store.create(key, {"apiVersion": "v1", "kind": "ConfigMap",
                                             "metadata": {"name": "kube-root-ca.crt", "namespace": name,
                                                          "uid": str(uuid.uuid4()),
                                                          "creationTimestamp": now_rfc3339(),
                                                          "annotations": {"kubernetes.io/description": (
                                                              "Contains a CA bundle that can be used "
                                                              "to verify the kube-apiserver when using "
                                                              "internal endpoints such as the internal "
                                                              "service IP or kubernetes.default.svc.")}},
                                             "data": {"ca.crt": self.ca_pem}})
                except store_base.StoreError:
                    pass
            except store_base.StoreError:
                pass

    async def _ensure_apiservices(self) -> None:
        """An APIService for every group-version served here, as kube-apiserver's autoregister controller
        keeps them (`service` unset: local, always Available), metrics.k8s.io's among them, since this
        apiserver serves the metrics API itself rather than proxying to a metrics-server."""
        seen: set[tuple[str, str]] = set()
        for r in RESOURCES:
            if (r.group, r.version) in seen or not r.group:  # "v1." (core) fails our name validation
                continue
            seen.add((r.group, r.version))
            name = f"{r.version}.{r.group}"
            try:
                await self.registry.store.get(APISERVICES.key(None, name))
                continue
            except store_base.NotFound:
                pass
            metrics = r.group == "metrics.k8s.io"
            spec: dict[str, Any] = {"group": r.group, "version": r.version,
                                    "groupPriorityMinimum": 100 if metrics else 18000,
                                    "versionPriority": 100 if metrics else 15}
            meta: dict[str, Any] = {"name": name}
            if not metrics:
                meta["labels"] = {"kube-aggregator.kubernetes.io/automanaged": "onstart"}
            try:
                await self.registry.create(APISERVICES, None, {
                    "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": meta,
                    "spec": spec})
                status = {"conditions": [{"type": "Available", "status": "True",
                                          "lastTransitionTime": now_rfc3339(), "reason": "Local",
                                          "message": "Local APIServices are always available"}]}

                def with_status(cur: dict[str, Any], st: dict[str, Any] = status) -> dict[str, Any]:
                    return {**cur, "status": st}

                await self.registry.patch_with_retry(APISERVICES, None, name, "status", with_status)
            except ApiError as e:
                if e.code != 409:
                    raise

    async def ensure_default_storage_class(self) -> None:
        """The `local-path` StorageClass, created once at start as k3s applies its local-storage manifest
        (deleting it or its default annotation sticks until the next start); the `csi-hostpath` class and
        its CSIDriver likewise."""
        await self._ensure_created(STORAGE_CLASSES, None, default_storage_class())
        await self._ensure_created(STORAGE_CLASSES, None, csi_hostpath_class())
        await self._ensure_created(CSI_DRIVERS, None, csi_hostpath_driver())

    async def _ensure_created(self, res: Any, ns: str | None, obj: dict[str, Any]) -> None:
        try:
            await self.registry.store.get(res.key(ns, obj["metadata"]["name"]))
        except store_base.NotFound:
            try:
                await self.registry.create(res, ns, obj)
            except ApiError as e:
                if e.code != 409:
                    raise

    async def _ensure_kubernetes_service(self) -> None:
        want_ip = self.registry.alloc.first_ip
        ports = [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": self.port}]
        try:
            svc = await self.registry.store.get(SERVICES.key("default", "kubernetes"))
        except store_base.NotFound:
            await self._ensure_created(SERVICES, "default", {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "kubernetes", "namespace": "default",
                             "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {"clusterIP": want_ip, "ports": ports, "type": "ClusterIP",
                         "sessionAffinity": "None"}})
            return
        spec = svc.get("spec") or {}
        if [{k: p.get(k) for k in ("name", "protocol", "port", "targetPort")}
            for p in spec.get("ports") or []] != ports:
            spec["ports"] = ports
            await self.registry.store.update(SERVICES.key("default", "kubernetes"), svc)

    async def _ensure_endpoints(self) -> None:
        eps = await self.peers.live_endpoints() if self.peers else [(self.ip, self.port)]
        subsets = endpoint_subsets(eps)
        await self._ensure_endpoint_slice(subsets)
        endpoints = {"apiVersion": "v1", "kind": "Endpoints",
                     "metadata": {"name": "kubernetes", "namespace": "default",
                                  "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}}}
        await self._upsert(ENDPOINTS.key("default", "kubernetes"), endpoints, {"subsets": subsets})

    async def _ensure_endpoint_slice(self, subsets: list[dict[str, Any]]) -> None:
        """The `kubernetes` EndpointSlice beside its Endpoints, as kube-apiserver's endpoint reconciler
        writes both (kube-proxies read slices: without it pods' KUBERNETES_SERVICE_HOST was refused)."""
        first = subsets[0] if subsets else {"addresses": [], "ports": []}
        ips = [a["ip"] for a in first["addresses"]]
        await self._upsert(ENDPOINT_SLICES.key("default", "kubernetes"), {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "kubernetes"}}}, {
            "addressType": "IPv6" if ips and ":" in ips[0] else "IPv4",
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips],
            "ports": first["ports"]})

    async def _upsert(self, key: str, new: dict[str, Any], want: dict[str, Any]) -> None:
        """`new` with `want` created at `key`, or the stored object's `want` fields brought to it (a
        concurrent writer — another apiserver — wins; the next repair pass looks again)."""
        store = self.registry.store
        try:
            cur = await store.get(key)
        except store_base.NotFound:
            new["metadata"].update({"uid": str(uuid.uuid4()), "creationTimestamp": now_rfc3339()})
            try:
                await store.create(key, {**new, **want})
            except store_base.AlreadyExists:
                pass
            return
        if {k: cur.get(k) for k in want} != want:
            cur.update(want)
            try:
                await store.update(key, cur, int(cur["metadata"]["resourceVersion"]))
            except (store_base.Conflict, store_base.NotFound):
                pass

    async def expire_events(self, ttl: float = EVENT_TTL) -> int:
        """Delete Events older than `ttl` seconds (kube-apiserver's --event-ttl, 1h): they would pile up
        forever."""
        store = self.registry.store
        cutoff = utcnow(self.clock) - dt.timedelta(seconds=ttl)
        removed = 0
        for res in (EVENTS, EVENTS_V1):
            items, _ = await store.list(res.key_prefix())
            for ev in items:
                m = ev.get("metadata") or {}
                when = parse_time(ev.get("lastTimestamp") or ev.get("eventTime")
                                  or m.get("creationTimestamp"))
                if when is not None and when < cutoff:
                    try:
                        await store.delete(res.key(m.get("namespace"), m["name"]))
                        removed += 1
                    except store_base.StoreError:
                        pass
        return removed

    async def reconcile_quotas(self) -> None:
        """Keep every ResourceQuota's status (hard, used) current, deletions included (the quota
        controller)."""
        store = self.registry.store
        quotas, _ = await store.list(QUOTAS.key_prefix())
        for q in quotas:
            ns = q["metadata"]["namespace"]
            hard = (q.get("spec") or {}).get("hard") or {}
            wanted: dict[Any, list[dict[str, Any]]] = {}
            for r in stored_resources():
                if not r.namespaced or r.name in VIRTUAL:
                    continue
                count_key = f"count/{r.name}" + (f".{r.group}" if r.group else "")
                core_pods = r.name == "pods" and not r.group
                if core_pods or count_key in hard or (not r.group and r.name in hard):
                    wanted[r], _ = await store.list(r.key_prefix(ns))
            used = admission.quota_used(q, wanted)
            st = q.get("status") or {}
            if st.get("used") != used or st.get("hard") != hard:
                q["status"] = {"hard": hard, "used": used}
                try:
                    await store.update(QUOTAS.key(ns, q["metadata"]["name"]), q,
                                       int(q["metadata"]["resourceVersion"]))
                except store_base.StoreError:
                    pass

    async def run(self, interval: float = 10.0) -> None:
        """Repair loop: renew our lease, re-ensure namespaces, Service and Endpoints periodically."""
        while True:
            try:
                if self.peers:
                    await self.peers.renew()
                await self.ensure()
                await self.reconcile_quotas()
                now = self.clock.monotonic()
                if now - self._last_expiry > 60:
                    self._last_expiry = now
                    await self.expire_events()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("bootstrap repair")
            await self.clock.sleep(interval)

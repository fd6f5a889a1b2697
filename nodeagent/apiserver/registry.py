"""REST semantics over the store, independent of HTTP: create, get, list, update, patch, delete.

Owns object metadata rules (uid, creationTimestamp, generation, resourceVersion preconditions,
generateName, deletionTimestamp + finalizers), defaults, validation and admission, and the
Service IP/port allocators. Handlers in `handlers.py` translate HTTP to these calls.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from nodeagent.api import (
    admission_policy,
    admission_webhooks,
    defaults,
    schema_validation,
    storage,
    validation,
)
from nodeagent.api.objects import copy_object
from nodeagent.api.pod_validation import validate_ephemeral_update, validate_pod_create
from nodeagent.api.qos import compute_pod_qos
from nodeagent.api.resources import Resource, builtin
from nodeagent.api.selectors import FieldRequirement, Selector, field_value, fields_match
from nodeagent.api.times import now_rfc3339
from nodeagent.apiserver import admission, errors, lifecycle
from nodeagent.apiserver.allocator import Allocators
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.metrics import Metrics
from nodeagent.apiserver.webhooks import Attributes, WebhookAdmission
from nodeagent.store import base as store_base

if TYPE_CHECKING:
    from nodeagent.apiserver.cache import WatchCache

log = logging.getLogger("nodeagent.apiserver")

# Kinds whose main-resource writes leave status alone (they have a status subresource).
_STATUS_SPLIT = {"Pod", "Deployment", "ReplicaSet", "DaemonSet", "StatefulSet", "Job", "CronJob", "Service",
                 "Namespace", "Node", "ResourceQuota", "PodDisruptionBudget", "ReplicationController",
                 "PersistentVolumeClaim", "PersistentVolume", "CustomResourceDefinition",
                 "CertificateSigningRequest", "APIService", "ValidatingAdmissionPolicy"}
_GEN_CHARS = "bcdfghjklmnpqrstvwxz2456789"
_PATCH_ATTEMPTS = 200  # a patch without a resourceVersion retries its conflicts this many times
_NO_SPEC_KEYS = ("metadata", "status", "apiVersion", "kind")
TERMINAL = ("Succeeded", "Failed")

NAMESPACES = builtin("", "v1", "namespaces")
PODS = builtin("", "v1", "pods")
SERVICES = builtin("", "v1", "services")
PRIORITY_CLASSES = builtin("scheduling.k8s.io", "v1", "priorityclasses")
LIMIT_RANGES = builtin("", "v1", "limitranges")
RUNTIME_CLASSES = builtin("node.k8s.io", "v1", "runtimeclasses")
INGRESSES = builtin("networking.k8s.io", "v1", "ingresses")
INGRESS_CLASSES = builtin("networking.k8s.io", "v1", "ingressclasses")
QUOTAS = builtin("", "v1", "resourcequotas")
SERVICE_ACCOUNTS = builtin("", "v1", "serviceaccounts")
CRDS = builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions")
STORAGE_CLASSES = builtin("storage.k8s.io", "v1", "storageclasses")

# Field selectors each resource accepts beyond metadata.name / metadata.namespace.
FIELD_LABELS: dict[str, set[str]] = {
    "pods": {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
             "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"},
    "events": {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
               "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
               "reason", "reportingComponent", "source", "type", "regarding.kind", "regarding.name",
               "regarding.namespace", "regarding.uid"},
    "nodes": {"spec.unschedulable"}, "secrets": {"type"}, "namespaces": {"status.phase"},
    "replicasets": {"status.replicas"}, "jobs": {"status.successful"},
    "services": {"spec.clusterIP", "spec.type"},
}


_rng = random.SystemRandom().getrandbits(64)
_uid_random = random.Random(_rng)


def new_uid() -> str:
    """A random (version 4) UUID from a seeded PRNG: no syscall per object on the create path."""
    return str(uuid.UUID(int=_uid_random.getrandbits(128), version=4))


def check_field_selector(res: Resource, reqs: tuple[FieldRequirement, ...]) -> None:
    allowed = FIELD_LABELS.get(res.name, set()) | {"metadata.name", "metadata.namespace"}
    for r in reqs:
        if r.field not in allowed:
            raise errors.bad_request(f'field label not supported: {r.field}')


def _field_getter(obj: Mapping[str, Any], path: str) -> str:
    if path == "source" and "source" in obj:
        return (obj.get("source") or {}).get("component", "")
    return field_value(obj, path)


def matches(obj: dict[str, Any], labels: Selector | None, fields: tuple[FieldRequirement, ...]) -> bool:
    if labels is not None and not labels.is_everything and not labels.matches(
            (obj.get("metadata") or {}).get("labels") or {}):
        return False
    return not fields or fields_match(obj, fields, _field_getter)


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in _NO_SPEC_KEYS}


class StaleWrite(ApiError):
    """409 Conflict: the object changed between the read a write was based on and the write itself."""

    def __init__(self, resource: str, name: str, group: str) -> None:
        e = errors.conflict(resource, name, group)
        super().__init__(e.code, e.reason, e.message, e.details)


class Registry:
    def __init__(self, store: store_base.Store, allocators: Allocators | None = None,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        self.store = store
        self.alloc = allocators or Allocators()
        self._svc_lock = asyncio.Lock()
        self._quota_locks: dict[str, asyncio.Lock] = {}
        self._bg: set[asyncio.Task] = set()
        # the watch cache, when the server has one: admission reads from it
        self.cache: WatchCache | None = None
        # the admission webhooks, when the server calls them
        self.webhooks: WebhookAdmission | None = None
        # the server's policy check on a write (RBAC escalation prevention): (resource, group, new, old)
        self.write_check: Callable[[str, str, dict[str, Any], dict[str, Any] | None],
                                   Awaitable[None]] | None = None

    def enable_webhooks(self, metrics: Metrics | None = None) -> None:
        """Call admission webhooks on writes (kube-apiserver's MutatingAdmissionWebhook and
        ValidatingAdmissionWebhook plugins), their configurations read like every admission input."""
        self.webhooks = WebhookAdmission(self._lookup, metrics=metrics)

    async def _lookup(self, res: Resource, ns: str | None) -> list[dict[str, Any]]:
        """Objects of a kind for admission decisions (read-only): from the watch cache when there is one."""
        if self.cache is not None:
            await self.cache.wait_fresh()
            entries, _ = self.cache.list(res.key_prefix(), ns if res.namespaced else None)
            return [e.obj for e in entries]
        items, _ = await self.store.list(res.key_prefix(ns))
        return items

    # ------------------------------------------------------------------ reads
    async def get(self, res: Resource, ns: str | None, name: str, *,
                  shared: bool = False) -> dict[str, Any]:
        """The object; `shared` as the store's get (read-only: the caller copies what it changes)."""
        try:
            return await self.store.get(res.key(ns, name), shared=shared)
        except store_base.NotFound:
            raise errors.not_found(res.name, name, res.group) from None

    async def list(self, res: Resource, ns: str | None, labels: Selector | None = None,
                   fields: tuple[FieldRequirement, ...] = ()) -> tuple[list[dict[str, Any]], int]:
        """Every matching object from the store (the HTTP list, with its resourceVersion options and
        pages, is served by the handlers from the watch cache)."""
        prefix = res.key_prefix(ns)
        ns_name = next((f.value for f in fields if f.field == "metadata.namespace" and f.op == "="), None)
        if res.namespaced and not ns and ns_name:
            prefix = res.key_prefix(ns_name)
        items, rev = await self.store.list(prefix)
        return [o for o in items if matches(o, labels, fields)], rev

    # ------------------------------------------------------------------ create
    async def create(self, res: Resource, ns: str | None, obj: Any, dry_run: bool = False,
                     owned: bool = False) -> dict[str, Any]:
        """`owned`: the caller hands `obj` over (a freshly decoded body), so it is not copied first."""
        obj = self._check_body(res, ns, obj, owned)
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        if res.namespaced:
            await self._check_namespace_open(ns or "", res)
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choice(_GEN_CHARS) for _ in range(5))
        meta["uid"] = new_uid()
        meta["creationTimestamp"] = now_rfc3339()
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(k, None)
        if res.kind in _STATUS_SPLIT and res.kind not in ("Node",):
            obj.pop("status", None)
        if res.kind not in ("Event", "ConfigMap", "Secret", "Endpoints", "Lease", "Namespace", "Node",
                            "ServiceAccount", "EndpointSlice", "PriorityClass", "LimitRange"):
            meta["generation"] = 1
        defaults.apply_defaults(obj, res.kind)
        self._admit_custom(res, obj)
        if res is PODS:
            await self._admit_pod(obj, ns or "")
            errs = validate_pod_create(obj.get("spec") or {})
            if errs:
                raise errors.invalid(res.kind, meta["name"], errs, res.group)
        if res is INGRESSES:
            admission.default_ingress_class(obj, list(await self._lookup(INGRESS_CLASSES, None)))
        if res.kind in ("PersistentVolumeClaim", "PersistentVolume"):
            await self._admit_storage(res, obj)
        if res is CRDS:
            lifecycle.establish_crd(obj)
        attrs = Attributes(res, "CREATE", ns or "", meta.get("name", ""), obj, None, dry_run=dry_run)
        obj = await self._mutating_webhooks(attrs, None)
        meta = obj["metadata"]
        self._validate(res, obj)
        if self.write_check is not None:
            await self.write_check(res.name, res.group, obj, None)
        if self.webhooks is not None:
            await self.webhooks.validate(attrs)
        if res is SERVICES:
            async with self._svc_lock:
                await self._refresh_allocations()
                errs = self.alloc.allocate(obj)
                if errs:
                    raise errors.invalid(res.kind, meta["name"], errs, res.group)
                try:
                    return await self._quota_and_create(res, ns, obj, dry_run)
                except BaseException:
                    self.alloc.release(obj)
                    raise
        created = await self._quota_and_create(res, ns, obj, dry_run)
        if res is NAMESPACES and not dry_run:
            await self._ensure_default_sa(meta["name"])
        return created

    async def _mutating_webhooks(self, attrs: Attributes, old: dict[str, Any] | None) -> dict[str, Any]:
        """The mutating webhooks on `attrs.obj`; a changed object is defaulted (and a custom one pruned and
        checked) again, as kube-apiserver decodes a webhook's patched object; what identifies the object
        (name, namespace, uid, creationTimestamp) is kept."""
        obj = attrs.obj
        assert obj is not None
        if self.webhooks is None or not await self.webhooks.mutating_configured():
            return obj
        before = copy_object(obj)
        patched = await self.webhooks.mutate(attrs)
        if patched is None or patched == before:
            return obj
        meta = patched.get("metadata")
        if not isinstance(meta, dict):
            meta = patched["metadata"] = {}
        for k in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion"):
            if k in before["metadata"]:
                meta[k] = before["metadata"][k]
            else:
                meta.pop(k, None)
        patched["apiVersion"], patched["kind"] = attrs.res.api_version, attrs.res.kind
        if not attrs.subresource:
            defaults.apply_defaults(patched, attrs.res.kind)
            self._admit_custom(attrs.res, patched, old)
        attrs.obj = patched
        return patched

    async def _quota_and_create(self, res: Resource, ns: str | None, obj: dict[str, Any],
                                dry_run: bool) -> dict[str, Any]:
        if res.namespaced and res is not QUOTAS:
            quotas = await self._lookup(QUOTAS, ns)
            if quotas:
                lock = self._quota_locks.setdefault(ns or "", asyncio.Lock())
                async with lock:
                    existing, _ = await self.store.list(res.key_prefix(ns))
                    used = admission.check_quota(res, obj, quotas, existing)
                    out = obj if dry_run else await self._store_create(res, obj)
                    if not dry_run:
                        await self._record_quota_use(ns or "", quotas, used)
                    return out
        return obj if dry_run else await self._store_create(res, obj)

    async def _store_create(self, res: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        for _ in range(8):
            try:
                return await self.store.create(res.key(meta.get("namespace"), meta["name"]), obj)
            except store_base.AlreadyExists:
                if not meta.get("generateName"):
                    break
                # a generated name collided: pick another (Kubernetes' RetryGenerateName)
                meta["name"] = meta["generateName"] + "".join(random.choice(_GEN_CHARS) for _ in range(5))
        raise errors.already_exists(res.name, meta["name"], res.group)

    async def _record_quota_use(self, ns: str, quotas: Iterable[dict[str, Any]],
                                used: dict[str, dict[str, str]]) -> None:
        for q in quotas:
            u = used.get(q["metadata"]["name"])
            if u is None:
                continue
            q = copy.deepcopy(q)
            st = q.setdefault("status", {})
            st["hard"] = (q.get("spec") or {}).get("hard") or {}
            st.setdefault("used", {}).update(u)
            try:
                await self.store.update(QUOTAS.key(ns, q["metadata"]["name"]), q)
            except store_base.StoreError:
                pass

    async def _ensure_default_sa(self, ns: str) -> None:
        sa = {"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": "default", "namespace": ns, "uid": str(uuid.uuid4()),
                           "creationTimestamp": now_rfc3339()}}
        try:
            await self.store.create(SERVICE_ACCOUNTS.key(ns, "default"), sa)
        except store_base.AlreadyExists:
            pass

    async def _admit_pod(self, pod: dict[str, Any], ns: str) -> None:
        classes = list(await self._lookup(PRIORITY_CLASSES, None))
        classes += [{"metadata": {"name": n}, "value": v}
                    for n, v in admission.SYSTEM_PRIORITY_CLASSES.items()
                    if not any(c["metadata"]["name"] == n for c in classes)]
        admission.resolve_priority(pod, classes)
        accounts = await self._lookup(SERVICE_ACCOUNTS, ns)
        admission.admit_service_account(pod, accounts)
        if (pod.get("spec") or {}).get("runtimeClassName") or (pod.get("spec") or {}).get("overhead"):
            admission.apply_runtime_class(pod, await self._lookup(RUNTIME_CLASSES, None))
        ranges = await self._lookup(LIMIT_RANGES, ns)
        if ranges:
            admission.apply_limit_ranges(pod, ranges)
            pod.setdefault("status", {})["qosClass"] = compute_pod_qos(pod)

    async def _admit_storage(self, res: Resource, obj: dict[str, Any]) -> None:
        """DefaultStorageClass (a claim without storageClassName gets the default class) and
        StorageObjectInUseProtection (the pvc-/pv-protection finalizer); both start Pending."""
        if res.kind == "PersistentVolumeClaim":
            spec = obj.setdefault("spec", {})
            if spec.get("storageClassName") is None and \
                    storage.ANN_BETA_STORAGE_CLASS not in storage.annotations_of(obj):
                default = storage.default_class(await self._lookup(STORAGE_CLASSES, None))
                if default is not None:
                    spec["storageClassName"] = default["metadata"]["name"]
        finalizer = storage.PVC_PROTECTION if res.kind == "PersistentVolumeClaim" else storage.PV_PROTECTION
        fins = obj["metadata"].setdefault("finalizers", [])
        if finalizer not in fins:
            fins.append(finalizer)
        obj["status"] = {"phase": "Pending"}

    async def _admit_claim_resize(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        cls = storage.claim_class(new)
        classes = await self._lookup(STORAGE_CLASSES, None) if cls else []
        sc = next((c for c in classes if c["metadata"]["name"] == cls), None)
        if not storage.resize_allowed(new, old, sc):
            name = new["metadata"]["name"]
            why = ("only dynamically provisioned pvc can be resized and the storageclass that provisions "
                   "the pvc must support resize")
            raise admission.forbidden(f'persistentvolumeclaims "{name}" is forbidden: {why}',
                                      "persistentvolumeclaims", name)

    async def _check_namespace_open(self, ns: str, res: Resource) -> None:
        try:
            nso = await self.store.get(NAMESPACES.key(None, ns))
        except store_base.NotFound:
            raise errors.not_found("namespaces", ns) from None
        if (nso.get("metadata") or {}).get("deletionTimestamp") and res.name not in ("events",):
            raise ApiError(403, "Forbidden",
                           f"{res.name} is forbidden: unable to create new content in namespace "
                           f"{ns} because it is being terminated",
                           {"kind": res.name, "causes": [{"reason": "NamespaceTerminating",
                                                          "message": f"namespace {ns} is being terminated",
                                                          "field": "metadata.namespace"}]})

    def _check_body(self, res: Resource, ns: str | None, obj: Any, owned: bool = False) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise errors.bad_request("the object provided is unrecognized (must be of type object)")
        if not owned:
            obj = copy.deepcopy(obj)
        av, kind = obj.get("apiVersion"), obj.get("kind")
        if av and av != res.api_version:
            raise errors.bad_request(f"the API version in the data ({av}) does not match the "
                                     f"expected API version ({res.api_version})")
        if kind and kind != res.kind:
            raise errors.bad_request(f"the kind in the data ({kind}) does not match the expected kind "
                                     f"({res.kind})")
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if res.namespaced and meta.get("namespace") and ns and meta["namespace"] != ns:
            raise errors.bad_request("the namespace of the provided object does not match the "
                                     "namespace sent on the request")
        return obj

    def _admit_custom(self, res: Resource, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        """A custom object through its CRD's structural schema: pruned, defaulted, validated; a CRD's schemas
        checked to be structural."""
        errs: validation.FieldErrors = []
        if res.schema is not None:
            errs = schema_validation.admit(obj, res.schema, old)
        elif res is CRDS:
            errs = schema_validation.crd_schema_errors(obj)
        if errs:
            raise errors.invalid(res.kind, obj["metadata"].get("name") or "", errs, res.group)

    def _validate(self, res: Resource, obj: dict[str, Any]) -> None:
        errs = validation.validate(obj, res.kind, res.namespaced)
        if res.group == admission_webhooks.GROUP and res.kind in admission_webhooks.KINDS:
            errs += admission_webhooks.validate_configuration(obj)
        if res.group == admission_webhooks.GROUP and res.kind == admission_policy.POLICY:
            errs += admission_policy.validate_policy(obj)
        if res.group == admission_webhooks.GROUP and res.kind == admission_policy.BINDING:
            errs += admission_policy.validate_binding(obj)
        if errs:
            raise errors.invalid(res.kind,
                                 obj["metadata"].get("name") or obj["metadata"].get("generateName", ""),
                                 errs, res.group)

    # ------------------------------------------------------------------ update
    async def update(self, res: Resource, ns: str | None, name: str, obj: Any, subresource: str = "",
                     dry_run: bool = False,
                     current: dict[str, Any] | None = None) -> tuple[dict[str, Any], bool]:
        """Replace an object (or its status); returns (object, created). An update whose body names no
        resourceVersion is unconditional: kube's GuaranteedUpdate applies it to the object as it is now,
        so a write landing between our read and our write makes it read again, not fail with 409. With
        `current` (a patch's read), the caller retries."""
        unconditional = current is None and isinstance(obj, dict) \
            and not (obj.get("metadata") or {}).get("resourceVersion")
        for attempt in range(_PATCH_ATTEMPTS if unconditional else 1):
            try:
                return await self._update_once(res, ns, name, obj, subresource, dry_run, current)
            except StaleWrite:
                if not unconditional:
                    raise
                await asyncio.sleep(random.uniform(0, 0.001 * min(attempt + 1, 20)))
        raise errors.conflict(res.name, name, res.group)

    async def _update_once(self, res: Resource, ns: str | None, name: str, obj: Any, subresource: str,
                           dry_run: bool, current: dict[str, Any] | None) -> tuple[dict[str, Any], bool]:
        obj = self._check_body(res, ns, obj)
        meta = obj["metadata"]
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the "
                                     f"name on the URL ({name})")
        meta["name"] = name
        if res.namespaced:
            meta["namespace"] = ns
        if current is None:
            try:
                current = await self.store.get(res.key(ns, name))
            except store_base.NotFound:
                if res.name in ("endpoints", "leases", "events") and not subresource:
                    meta.pop("resourceVersion", None)
                    return await self.create(res, ns, obj, dry_run), True
                raise errors.not_found(res.name, name, res.group) from None
        cur_meta = current["metadata"]
        rv = meta.get("resourceVersion")
        if rv and rv != cur_meta.get("resourceVersion"):
            raise errors.conflict(res.name, name, res.group)
        if meta.get("uid") and meta["uid"] != cur_meta.get("uid"):  # the body's uid is a precondition
            raise errors.conflict(res.name, name, res.group,
                                  f"Precondition failed: UID in precondition: {meta['uid']}, UID in object "
                                  f"meta: {cur_meta.get('uid')}")
        new = self._merge_for_update(res, current, obj, subresource)
        nm = new["metadata"]
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "generateName"):
            if k in cur_meta:
                nm[k] = cur_meta[k]
            else:
                nm.pop(k, None)
        nm.pop("selfLink", None)
        if "managedFields" not in nm and "managedFields" in cur_meta:
            nm["managedFields"] = cur_meta["managedFields"]  # a write that does not mention them keeps them
        if res.kind == "Namespace":
            defaults.namespace(new)
        if res is SERVICES and not subresource:
            defaults.service_type_change(new, current)
        if not subresource:
            defaults.apply_defaults(new, res.kind)
        elif res is SERVICES and subresource == "status":
            defaults.service_status(new)
        self._admit_custom(res, new, current)
        attrs = Attributes(res, "UPDATE", ns or "", name, new, current, subresource, dry_run)
        new = await self._mutating_webhooks(attrs, current)
        nm = new["metadata"]
        if "generation" in cur_meta:
            changed = _spec_part(new) != _spec_part(current)
            nm["generation"] = cur_meta["generation"] + (1 if changed else 0)
        self._validate(res, new)
        if subresource == "ephemeralcontainers":
            errs = validate_ephemeral_update(new.get("spec") or {}, current.get("spec") or {})
            if errs:
                raise errors.invalid(res.kind, name, errs, res.group)
        if not subresource:
            errs = validation.validate_update(new, current, res.kind)
            if errs:
                raise errors.invalid(res.kind, name, errs, res.group)
            if res.kind == "PersistentVolumeClaim":
                await self._admit_claim_resize(new, current)
            if self.write_check is not None:
                await self.write_check(res.name, res.group, new, current)
        if self.webhooks is not None:
            await self.webhooks.validate(attrs)
        if res is SERVICES and not subresource:
            async with self._svc_lock:
                await self._refresh_allocations()
                errs = self.alloc.allocate(new, current)
                if errs:
                    self.alloc.allocate(current)
                    raise errors.invalid(res.kind, name, errs, res.group)
        nm["resourceVersion"] = cur_meta.get("resourceVersion")
        if new == current:
            return current, False
        if dry_run:
            return new, False
        if nm.get("deletionTimestamp") and not nm.get("finalizers") and not (
                res is PODS and (current.get("spec") or {}).get("nodeName") and not _terminal(current)
                and cur_meta.get("deletionGracePeriodSeconds")):
            return await self._remove(res, ns, name, current), False
        try:
            out = await self.store.update(res.key(ns, name), new, int(cur_meta["resourceVersion"]))
        except store_base.Conflict:
            raise StaleWrite(res.name, name, res.group) from None
        except store_base.NotFound:
            raise errors.not_found(res.name, name, res.group) from None
        return out, False

    def _merge_for_update(self, res: Resource, current: dict[str, Any], obj: dict[str, Any],
                          subresource: str) -> dict[str, Any]:
        if subresource == "ephemeralcontainers":
            # Only spec.ephemeralContainers comes from the body (kube-apiserver's ephemeralcontainers
            # strategy); each new one gets the container defaults.
            new = copy.deepcopy(current)
            ecs = (obj.get("spec") or {}).get("ephemeralContainers") or []
            new.setdefault("spec", {})["ephemeralContainers"] = ecs
            defaults.containers(ecs)
            return new
        if subresource == "status":
            new = copy.deepcopy(current)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
            return new
        new = obj
        if res.kind in _STATUS_SPLIT:
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
        if res is NAMESPACES:
            new["spec"] = copy.deepcopy(current.get("spec") or {})
        return new

    async def patch_with_retry(self, res: Resource, ns: str | None, name: str, subresource: str,
                               mutate: Callable[[dict[str, Any]], dict[str, Any]], dry_run: bool = False,
                               create_missing: Callable[[], dict[str, Any]]
                               | None = None) -> tuple[dict[str, Any], bool]:
        """Read, apply `mutate`, write with the read's resourceVersion; retry on a concurrent write, as
        kube-apiserver's GuaranteedUpdate does for a patch that does not pin a resourceVersion (until it
        lands; bounded here by attempts, with jittered backoff so N concurrent writers do not collide N
        times)."""
        for attempt in range(_PATCH_ATTEMPTS):
            try:
                current = await self.store.get(res.key(ns, name))
            except store_base.NotFound:
                if create_missing is not None and not subresource:
                    return await self.create(res, ns, create_missing(), dry_run), True
                raise errors.not_found(res.name, name, res.group) from None
            new = mutate(copy.deepcopy(current))
            uid = (new.get("metadata") or {}).get("uid")
            if uid and uid != current["metadata"].get("uid"):  # kube's ValidateObjectMetaUpdate
                cause = {"reason": "FieldValueInvalid", "field": "metadata.uid",
                         "message": f'Invalid value: "{uid}": field is immutable'}
                raise errors.invalid(res.kind, name, [cause], res.group)
            pinned = (new.get("metadata") or {}).get("resourceVersion")
            if not pinned or pinned == current["metadata"].get("resourceVersion"):
                new.setdefault("metadata", {})["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                return await self.update(res, ns, name, new, subresource, dry_run, current=current)
            except ApiError as e:
                if e.code == 409 and e.reason == "Conflict" and not (pinned and pinned !=
                                                                     current["metadata"].get("resourceVersion")):
                    await asyncio.sleep(random.uniform(0, 0.001 * min(attempt + 1, 20)))
                    continue
                raise
        raise errors.conflict(res.name, name, res.group)

    # ------------------------------------------------------------------ delete
    async def delete(self, res: Resource, ns: str | None, name: str, options: dict[str, Any] | None = None,
                     dry_run: bool = False) -> dict[str, Any]:
        options = options or {}
        try:
            current = await self.store.get(res.key(ns, name))
        except store_base.NotFound:
            raise errors.not_found(res.name, name, res.group) from None
        meta = current["metadata"]
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise errors.conflict(res.name, name, res.group,
                                  f"Precondition failed: UID in precondition: {pre['uid']}, UID in "
                                  f"object meta: {meta.get('uid')}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
            raise errors.conflict(res.name, name, res.group,
                                  "Precondition failed: ResourceVersion in precondition: "
                                  f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                  f"{meta.get('resourceVersion')}")
        if self.webhooks is not None:
            attrs = Attributes(res, "DELETE", ns or "", name, None, current, dry_run=dry_run,
                               options={k: v for k, v in options.items() if k not in ("apiVersion", "kind")})
            await self.webhooks.mutate(attrs)
            await self.webhooks.validate(attrs)
        if dry_run:
            return current
        grace = options.get("gracePeriodSeconds")
        policy = options.get("propagationPolicy")
        if options.get("orphanDependents") is True:
            policy = "Orphan"
        if res is NAMESPACES:
            out, started = await lifecycle.delete_namespace(self.store, current)
            if started:
                finish = lifecycle.finish_namespace(self.store, self.delete, name)
                t = asyncio.get_running_loop().create_task(finish)
                self._bg.add(t)
                t.add_done_callback(self._bg.discard)
            return out
        if res is CRDS:
            await lifecycle.delete_custom_objects(self.store, current)
        finalizers = list(meta.get("finalizers") or [])
        # As kube-apiserver: these two policies are carried out by the garbage collector, which removes
        # its finalizer when the dependents are orphaned / deleted.
        if policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        if policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        graceful = bool(res is PODS and (current.get("spec") or {}).get("nodeName")
                        and not _terminal(current))
        grace_s: float = 0  # the pod's grace period when the deletion is graceful
        if graceful:
            if grace is None:
                grace = (current.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            grace_s = grace
            graceful = grace_s > 0
            if meta.get("deletionTimestamp") and grace_s >= (meta.get("deletionGracePeriodSeconds") or 0):
                return current
        if finalizers or graceful:
            if meta.get("deletionTimestamp") and not graceful:
                return current
            new = copy.deepcopy(current)
            nm = new["metadata"]
            when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=grace_s if graceful else 0)
            nm["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
            nm["deletionGracePeriodSeconds"] = int(grace_s) if graceful else 0
            nm["finalizers"] = finalizers
            try:
                return await self.store.update(res.key(ns, name), new, int(meta["resourceVersion"]))
            except store_base.Conflict:
                return await self.delete(res, ns, name, options)
        return await self._remove(res, ns, name, current)

    async def _remove(self, res: Resource, ns: str | None, name: str,
                      current: dict[str, Any]) -> dict[str, Any]:
        try:
            out = await self.store.delete(res.key(ns, name))
        except store_base.NotFound:
            raise errors.not_found(res.name, name, res.group) from None
        if res is SERVICES:
            async with self._svc_lock:
                self.alloc.release(current)
        return out

    async def _refresh_allocations(self) -> None:
        """Re-read what the stored Services hold (other servers on the same store allocate too)."""
        services, _ = await self.store.list(SERVICES.key_prefix())
        self.alloc.rebuild(services)

    def rebuild_allocators(self, services: Iterable[dict[str, Any]]) -> None:
        self.alloc.rebuild(services)

    async def close(self) -> None:
        if self.webhooks is not None:
            await self.webhooks.close()
        for t in list(self._bg):
            t.cancel()
        for t in list(self._bg):
            try:
                await t
            except BaseException:
                pass


def _terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL

"""The served resources: one row per (group, version, resource), the single source for the apiserver's routing
and discovery and for the client's paths."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclasses.dataclass(frozen=True)
class Resource:
    group: str
    version: str
    name: str  # plural, e.g. "pods"
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    # a custom resource's structural schema (its CRD version's openAPIV3Schema); None for built-in kinds
    schema: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def gv_path(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def storage_prefix(self) -> str:
        """Where this resource's objects live in the store, as kube-apiserver lays them out in etcd:
        `/registry/<resource>/` for the built-in kinds (with its few special prefixes: nodes under
        `minions`, services under `services/specs`, endpoints under `services/endpoints`,
        replicationcontrollers under `controllers`, ingresses under `ingress`), and
        `/registry/<group>/<resource>/` for CRDs, APIServices and custom resources."""
        prefix = _STORAGE_PREFIXES.get((self.group, self.name))
        if prefix is None:
            prefix = _storage_prefix(self.group, self.name, builtin=(self.group, self.name) in _BUILTIN)
            _STORAGE_PREFIXES[(self.group, self.name)] = prefix
        return prefix

    def key_prefix(self, namespace: str | None = None) -> str:
        """Store key prefix of this resource's objects (in one namespace when given)."""
        base = self.storage_prefix
        if self.namespaced and namespace:
            return f"{base}{namespace}/"
        return base

    def key(self, namespace: str | None, name: str) -> str:
        if self.namespaced:
            return f"{self.storage_prefix}{namespace}/{name}"
        return f"{self.storage_prefix}{name}"


# kube-apiserver's SpecialDefaultResourcePrefixes (pkg/kubeapiserver/default_storage_factory_builder.go)
SPECIAL_PREFIXES = {
    ("", "replicationcontrollers"): "controllers",
    ("", "endpoints"): "services/endpoints",
    ("", "nodes"): "minions",
    ("", "services"): "services/specs",
    ("networking.k8s.io", "ingresses"): "ingress",
}
# Groups whose resources keep the group in their keys, as kube-apiserver's apiextensions and aggregator
# servers store them. events.k8s.io Events are kept apart from core Events here (kube-apiserver stores
# both under /registry/events/ and converts; nodeagent serves the two shapes from two prefixes); the
# metrics.k8s.io objects are computed, never stored.
GROUP_QUALIFIED = frozenset({"apiextensions.k8s.io", "apiregistration.k8s.io", "events.k8s.io",
                             "metrics.k8s.io"})
_STORAGE_PREFIXES: dict[tuple[str, str], str] = {}


def _storage_prefix(group: str, name: str, builtin: bool) -> str:
    if not builtin or group in GROUP_QUALIFIED:
        return f"/registry/{group}/{name}/"
    return f"/registry/{SPECIAL_PREFIXES.get((group, name), name)}/"


def legacy_key_prefix(res: Resource) -> str:
    """Where nodeagent before the kube layout stored a built-in resource: `/registry/<group or core>/<res>/`
    (read once at start by the store migration)."""
    return f"/registry/{res.group or 'core'}/{res.name}/"


R = Resource
_ALL = ("all",)
RESOURCES: tuple[Resource, ...] = (
    R("", "v1", "namespaces", "Namespace", False, ("ns",), (), ("status", "finalize"),
      ("create", "delete", "get", "list", "patch", "update", "watch")),
    R("", "v1", "pods", "Pod", True, ("po",), _ALL,
      ("status", "binding", "eviction", "log", "exec", "attach", "portforward", "proxy",
       "ephemeralcontainers")),
    R("", "v1", "nodes", "Node", False, ("no",), (), ("status", "proxy")),
    R("", "v1", "services", "Service", True, ("svc",), _ALL, ("status", "proxy"),
      ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")),
    R("", "v1", "endpoints", "Endpoints", True, ("ep",)),
    R("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    R("", "v1", "secrets", "Secret", True),
    R("", "v1", "events", "Event", True, ("ev",)),
    R("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",), (), ("token",)),
    R("", "v1", "resourcequotas", "ResourceQuota", True, ("quota",), (), ("status",)),
    R("", "v1", "limitranges", "LimitRange", True, ("limits",)),
    R("", "v1", "podtemplates", "PodTemplate", True),
    R("", "v1", "replicationcontrollers", "ReplicationController", True, ("rc",), _ALL, ("status", "scale")),
    R("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("pvc",), (), ("status",)),
    R("", "v1", "persistentvolumes", "PersistentVolume", False, ("pv",), (), ("status",)),
    R("apps", "v1", "deployments", "Deployment", True, ("deploy",), _ALL, ("status", "scale")),
    R("apps", "v1", "replicasets", "ReplicaSet", True, ("rs",), _ALL, ("status", "scale")),
    R("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), _ALL, ("status",)),
    R("apps", "v1", "statefulsets", "StatefulSet", True, ("sts",), _ALL, ("status", "scale")),
    R("apps", "v1", "controllerrevisions", "ControllerRevision", True),
    R("batch", "v1", "jobs", "Job", True, (), _ALL, ("status",)),
    R("batch", "v1", "cronjobs", "CronJob", True, ("cj",), _ALL, ("status",)),
    R("coordination.k8s.io", "v1", "leases", "Lease", True),
    R("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True),
    R("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, ("pc",)),
    R("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",), (), ("status",)),
    R("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, ("netpol",)),
    R("events.k8s.io", "v1", "events", "Event", True, ("ev",)),
    # Stored and served so real manifests apply; nothing in nodeagent acts on them (yet).
    R("networking.k8s.io", "v1", "ingresses", "Ingress", True, ("ing",), (), ("status",)),
    R("networking.k8s.io", "v1", "ingressclasses", "IngressClass", False),
    R("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, ("sc",)),
    R("storage.k8s.io", "v1", "csidrivers", "CSIDriver", False),
    R("storage.k8s.io", "v1", "csinodes", "CSINode", False),
    R("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", False, (), (), ("status",)),
    R("storage.k8s.io", "v1", "csistoragecapacities", "CSIStorageCapacity", True),
    R("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True, ("hpa",),
      _ALL, ("status",)),
    # Served beside v2 and stored as v2 (converted on the way in and out, see STORAGE_VERSION).
    R("autoscaling", "v1", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True, ("hpa",),
      _ALL, ("status",)),
    R("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False),
    # RBAC objects: read by the apiserver's authorizer (apiserver/authz/)
    R("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    R("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    R("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    R("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    R("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False, (), (), (),
      ("create",)),
    R("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False, (), (), (),
      ("create",)),
    R("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False, (), (), (),
      ("create",)),
    R("authorization.k8s.io", "v1", "localsubjectaccessreviews", "LocalSubjectAccessReview", True, (), (), (),
      ("create",)),
    R("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False, (), (), (), ("create",)),
    R("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False, (), (), (),
      ("create",)),
    R("certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest",
      False, ("csr",), (), ("status", "approval")),
    R("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
      ("crd", "crds"), (), ("status",)),
    R("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration",
      False, (), ("api-extensions",)),
    R("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
      "ValidatingWebhookConfiguration", False, (), ("api-extensions",)),
    R("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy",
      False, (), ("api-extensions",), ("status",)),
    R("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
      "ValidatingAdmissionPolicyBinding", False, (), ("api-extensions",)),
    R("apiregistration.k8s.io", "v1", "apiservices", "APIService", False, (), ("api-extensions",),
      ("status",)),
    # metrics.k8s.io: computed from the kubelets' resource metrics on every read, never stored
    R("metrics.k8s.io", "v1beta1", "nodes", "NodeMetrics", False, (), (), (), ("get", "list")),
    R("metrics.k8s.io", "v1beta1", "pods", "PodMetrics", True, (), (), (), ("get", "list")),
)
METRICS_GROUP = "metrics.k8s.io"
# computed on create, never stored
VIRTUAL = {"selfsubjectaccessreviews", "selfsubjectrulesreviews", "subjectaccessreviews",
           "localsubjectaccessreviews", "tokenreviews", "selfsubjectreviews"}

# Resources served in a version other than the one they are stored in: (group, version, name) -> the
# stored version. Their objects live under the stored resource's keys, converted per request.
STORAGE_VERSION = {("autoscaling", "v1", "horizontalpodautoscalers"): "v2"}

# Subresources whose kind differs from the parent's, as discovery lists them.
SUBRESOURCE_KINDS = {
    "binding": ("", "", "Binding", ("create",)),
    "eviction": ("policy", "v1", "Eviction", ("create",)),
    "token": ("authentication.k8s.io", "v1", "TokenRequest", ("create",)),
    "scale": ("autoscaling", "v1", "Scale", ("get", "patch", "update")),
    "status": (None, None, None, ("get", "patch", "update")),
    "log": ("", "", "Pod", ("get",)),
    "exec": ("", "", "PodExecOptions", ("create", "get")),
    "attach": ("", "", "PodAttachOptions", ("create", "get")),
    "portforward": ("", "", "PodPortForwardOptions", ("create", "get")),
    "proxy": ("", "", "PodProxyOptions", ("create", "delete", "get", "patch", "update")),
    "finalize": (None, None, None, ("update",)),
    "approval": (None, None, None, ("get", "patch", "update")),
    "ephemeralcontainers": (None, None, None, ("get", "patch", "update")),
}

CRD_PREFIX = "/registry/apiextensions.k8s.io/customresourcedefinitions/"
_BY_PATH: dict[tuple[str, str, str], Resource] = {(r.group, r.version, r.name): r for r in RESOURCES}
_BUILTIN = frozenset((r.group, r.name) for r in RESOURCES)
_DYNAMIC: dict[str, list[Resource]] = {}  # CRD name -> the resources it serves (one per served version)
_generation = [0]  # bumped on every CRD change: what is derived from the served set (OpenAPI) is rebuilt


def generation() -> int:
    """A number that changes whenever the set of served resources (or a custom resource's schema) does."""
    return _generation[0]


def all_resources() -> list[Resource]:
    return list(RESOURCES) + [r for rs in _DYNAMIC.values() for r in rs]


def storage_resource(res: Resource) -> Resource:
    """The resource whose stored objects `res` serves (itself, but for a converted version)."""
    version = STORAGE_VERSION.get((res.group, res.version, res.name))
    return res if version is None else _BY_PATH[(res.group, version, res.name)]


def stored_resources() -> list[Resource]:
    """Every resource once per stored kind (what walks the store: namespace deletion, quota counts)."""
    return [r for r in all_resources() if storage_resource(r) is r]


def is_custom(res: Resource) -> bool:
    """Served by a CustomResourceDefinition, not built in (kube's CRD handler takes no strategic merge
    patch)."""
    return _BY_PATH.get((res.group, res.version, res.name)) is None


def custom_resources() -> list[Resource]:
    """The resources CustomResourceDefinitions serve."""
    return [r for rs in _DYNAMIC.values() for r in rs]


def group_versions() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in all_resources():
        out.setdefault(r.group, [])
        if r.version not in out[r.group]:
            out[r.group].append(r.version)
    return out


def lookup(group: str, version: str, name: str) -> Resource | None:
    r = _BY_PATH.get((group, version, name))
    if r is None and _DYNAMIC:
        r = next((d for rs in _DYNAMIC.values() for d in rs
                  if (d.group, d.version, d.name) == (group, version, name)), None)
    return r


def builtin(group: str, version: str, name: str) -> Resource:
    """One of the resources every cluster serves (not a custom one): a KeyError names a typo."""
    return _BY_PATH[(group, version, name)]


def by_kind(api_version: str, kind: str) -> Resource | None:
    group, _, version = api_version.rpartition("/")
    for r in all_resources():
        if r.group == group and r.version == version and r.kind == kind:
            return r
    return None


_by_prefix: tuple[int, dict[str, bool]] = (-1, {})  # (generation, storage prefix -> namespaced)


def split_key(key: str) -> tuple[str, str, str]:
    """A store key -> (its resource's storage prefix, namespace ('' when cluster-scoped), name).

    Prefixes are one segment deep (`/registry/pods/`) or two (`/registry/services/specs/`,
    `/registry/<group>/<plural>/`); a key of no served resource is split as a namespaced one when it has
    two segments after a two-segment prefix."""
    global _by_prefix
    gen, index = _by_prefix
    if gen != _generation[0]:
        index = {r.storage_prefix: r.namespaced for r in all_resources()}
        _by_prefix = (_generation[0], index)
    parts = key.split("/")  # ['', 'registry', a, b, ...]
    for depth in (3, 4):
        prefix = "/".join(parts[:depth]) + "/"
        namespaced = index.get(prefix)
        if namespaced is not None:
            rest = parts[depth:]
            if namespaced and len(rest) >= 2:
                return prefix, rest[0], "/".join(rest[1:])
            return prefix, "", "/".join(rest)
    if len(parts) == 6:
        return "/".join(parts[:4]) + "/", parts[4], parts[5]
    return "/".join(parts[:4]) + "/", "", parts[-1]


def split_prefix(prefix: str) -> tuple[str, str | None]:
    """A watch prefix (`Resource.key_prefix(ns)`) -> (the resource's storage prefix, namespace or None)."""
    res_prefix, ns, name = split_key(prefix + "x")
    if ns:
        return res_prefix, ns
    return res_prefix, None


def resources_in(group: str, version: str) -> list[Resource]:
    return [r for r in all_resources() if r.group == group and r.version == version]


def sync_crd(name: str, crd: dict | None) -> None:
    """Serve (or stop serving) the custom resources a CustomResourceDefinition declares."""
    _generation[0] += 1
    if crd is None or (crd.get("metadata") or {}).get("deletionTimestamp"):
        _DYNAMIC.pop(name, None)
        return
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out = []
    for v in spec.get("versions") or []:
        if not v.get("served", True) or not names.get("plural") or not names.get("kind"):
            continue
        subs = tuple(k for k in ("status", "scale") if k in (v.get("subresources") or {}))
        out.append(Resource(spec.get("group", ""), v.get("name", "v1"), names["plural"], names["kind"],
                            spec.get("scope", "Namespaced") == "Namespaced",
                            tuple(names.get("shortNames") or ()), tuple(names.get("categories") or ()), subs,
                            schema=(v.get("schema") or {}).get("openAPIV3Schema")))
    _DYNAMIC[name] = out

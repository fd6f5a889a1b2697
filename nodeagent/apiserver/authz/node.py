"""The Node authorizer for users in system:nodes named system:node:<name> (kube's
plugin/pkg/auth/authorizer/node), with NodeRestriction's limits on writes as `auth.node_may` states them.

Reads of Secrets, ConfigMaps, ServiceAccounts and ResourceClaims follow the graph kube's authorizer keeps:
a node may read one only while a pod bound to it refers to it (its volumes, environment, image pull secrets,
its claims' PersistentVolumes' CSI secrets, its ServiceAccount, its resource claims), by `get` or by a
list/watch narrowed to it with `fieldSelector=metadata.name=<name>` (the kubelet's single-object watches).
The relationships are read from the watch cache when asked, so a pod created a moment ago counts. Two reads
beyond kube's graph, both for node-side parts that run under the node's credential on a joined node: the
`kube-root-ca.crt` ConfigMaps (the kubelet's server checks client certificates against that public CA),
and the Secrets every node's ingress proxy serves certificates from, as ingress-nginx's controller on every
node reads them: TLS Secrets listed with `fieldSelector=type=kubernetes.io/tls`, and one of any type that
an Ingress of its namespace names in `spec.tls` (ingress-nginx reads `tls.crt`/`tls.key` whatever the type),
by name as above. Other reads are the
system:node role's and the node-side components' (Services, Endpoints, Pods, Nodes, claims and volumes for
the node's provisioners). Anything it refuses falls through to RBAC, as kube's chain does (system:node's
ClusterRole has no binding by default)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from nodeagent.api import pod_refs
from nodeagent.api.resources import builtin
from nodeagent.api.selectors import SelectorError, parse_field_selector
from nodeagent.apiserver import auth
from nodeagent.apiserver.authz.attributes import Attributes, Decision, Subject
from nodeagent.store import base as store_base

Getter = Callable[[str], Awaitable[dict[str, Any]]]
PODS = builtin("", "v1", "pods").storage_prefix
INGRESSES = builtin("networking.k8s.io", "v1", "ingresses").storage_prefix
CLAIMS = builtin("", "v1", "persistentvolumeclaims")
VOLUMES = builtin("", "v1", "persistentvolumes")
# the kinds a node reads only through its pods (group, resource)
GRAPH = {("", "secrets"), ("", "configmaps"), ("", "serviceaccounts"), ("resource.k8s.io", "resourceclaims")}
ROOT_CA = "kube-root-ca.crt"
TLS_SELECTOR = "type=kubernetes.io/tls"


class Lister(Protocol):
    def list(self, res_prefix: str, ns: str | None) -> tuple[list[Any], int]: ...


def node_name_of(subject: Subject) -> str | None:
    """The node a user in system:nodes named system:node:<name> is (None: not a node)."""
    if auth.NODES_GROUP in subject.groups and subject.name.startswith("system:node:"):
        return subject.name[len("system:node:") :]
    return None


def node_name(a: Attributes) -> str | None:
    return node_name_of(a.subject)


def selected_name(field_selector: str) -> str | None:
    """The one name a field selector narrows to (`metadata.name=x`, among other terms), else None."""
    try:
        terms = parse_field_selector(field_selector)
    except SelectorError:
        return None
    names = [t.value for t in terms if t.field == "metadata.name" and t.op in ("=", "==")]
    return names[0] if len(names) == 1 else None


def _answered_not_found(a: Attributes) -> bool:
    """A node's write to an object that does not exist, which can only be a NotFound: a delete, a status
    write, a patch of a volume (whose creation by a server-side apply NodeRestriction checks), as kube's
    NodeRestriction admission looks the object up and answers NotFound (a kubelet patching a mirror pod
    just removed, a provisioner a volume it just deleted)."""
    return a.verb == "delete" or (a.verb in ("patch", "update") and a.subresource == "status") \
        or (a.verb == "patch" and a.resource == "persistentvolumes" and not a.subresource)


class NodeAuthorizer:
    def __init__(self, pods: Lister, get: Getter) -> None:
        self.pods = pods  # the watch cache: pods by namespace
        self.get = get

    async def authorize(self, a: Attributes, key: str | None, body: Any) -> tuple[Decision, str]:
        """`key`: the object's store key (None for collections); `body`: a create's object."""
        node = node_name(a)
        if node is None or not a.resource_request:
            return Decision.NO_OPINION, ""
        if (a.api_group, a.resource) in GRAPH and not a.subresource and a.verb in auth.READ_VERBS:
            return await self._graph_read(node, a)
        stored = None
        if key is not None and a.verb not in auth.READ_VERBS:
            with contextlib.suppress(store_base.NotFound):
                stored = await self.get(key)
        if stored is None and key is not None and _answered_not_found(a):
            return Decision.ALLOW, ""  # gone: NotFound, as NodeRestriction answers (the writer expects it)
        obj = body if a.verb == "create" and not a.subresource else stored
        why = auth.node_may(node, a.verb, a.resource, a.subresource, a.namespace, a.name,
                            obj if isinstance(obj, dict) else None)
        if why is None:
            return Decision.ALLOW, ""
        return Decision.NO_OPINION, why

    async def _graph_read(self, node: str, a: Attributes) -> tuple[Decision, str]:
        if a.resource == "secrets" and a.verb != "get" and TLS_SELECTOR in a.field_selector.split(","):
            return Decision.ALLOW, ""  # the ingress proxies' TLS certificates
        name = a.name or (selected_name(a.field_selector) if a.verb != "get" else None)
        if not name or not a.namespace:
            return Decision.NO_OPINION, (
                f"node '{node}' can only get individual resources of this type"
                if a.verb == "get" or a.namespace else
                f"node '{node}' can only read {a.resource} in a namespace")
        if a.resource == "configmaps" and name == ROOT_CA:
            return Decision.ALLOW, ""
        if await self._related(node, a.resource, a.namespace, name):
            return Decision.ALLOW, ""
        if a.resource == "secrets" and self._ingress_tls(a.namespace, name):
            return Decision.ALLOW, ""
        return Decision.NO_OPINION, f"no relationship found between node '{node}' and this object"

    def _ingress_tls(self, ns: str, name: str) -> bool:
        """Whether an Ingress in `ns` names Secret `name` for TLS (every node's ingress proxy serves it)."""
        entries, _ = self.pods.list(INGRESSES, ns)
        return any(t.get("secretName") == name
                   for e in entries for t in (e.obj.get("spec") or {}).get("tls") or ())

    async def _related(self, node: str, resource: str, ns: str, name: str) -> bool:
        """Whether a pod bound to `node` in `ns` refers to `resource` `name` (through its claims' volumes too,
        for a Secret)."""
        entries, _ = self.pods.list(PODS, ns)
        pods = [e.obj for e in entries if (e.obj.get("spec") or {}).get("nodeName") == node]
        refs: Callable[[dict[str, Any]], set[str]] = {
            "secrets": pod_refs.secret_names, "configmaps": pod_refs.configmap_names,
            "serviceaccounts": lambda p: {pod_refs.service_account_name(p)},
            "resourceclaims": pod_refs.resource_claim_names}[resource]
        if any(name in refs(p) for p in pods):
            return True
        if resource != "secrets":
            return False
        for claim in {c for p in pods for c in pod_refs.claim_names(p)}:  # claim → volume → its CSI secrets
            with contextlib.suppress(store_base.NotFound):
                pvc = await self.get(CLAIMS.key(ns, claim))
                volume = (pvc.get("spec") or {}).get("volumeName")
                pv = await self.get(VOLUMES.key(None, volume)) if volume else {}
                if (ns, name) in pod_refs.volume_secret_refs(pv):
                    return True
        return False

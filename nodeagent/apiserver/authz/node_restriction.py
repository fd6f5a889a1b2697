"""The NodeRestriction admission plugin's checks of what a node writes, beyond the Node authorizer's
"whose object" (`auth.node_may`): a node sets no label of the kubernetes.io / k8s.io namespaces but the
kubelet's own (and never node-restriction.kubernetes.io ones, which are for admins to pin workloads by), and
the mirror pods it creates refer to no Secret, ConfigMap, claim or ServiceAccount (a static pod may not reach
the API's objects through its mirror), and a volume it creates is pinned to it."""

from __future__ import annotations

from typing import Any

from nodeagent.api import pod_refs
from nodeagent.apiserver import auth, errors
from nodeagent.apiserver.authz import node
from nodeagent.apiserver.authz.escalation import REQUESTER

# kube's kubeletapis: the labels a kubelet may set on its Node, and the namespaces it owns
KUBELET_LABELS = {
    "kubernetes.io/hostname", "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type", "kubernetes.io/os",
    "kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
}
KUBELET_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
RESTRICTED = "node-restriction.kubernetes.io"


def _namespace(label: str) -> str:
    return label.split("/", 1)[0] if "/" in label else ""


def _within(ns: str, domain: str) -> bool:
    return ns == domain or ns.endswith("." + domain)


def forbidden_label(label: str) -> bool:
    ns = _namespace(label)
    if _within(ns, RESTRICTED):
        return True
    kube = _within(ns, "kubernetes.io") or _within(ns, "k8s.io")
    return kube and label not in KUBELET_LABELS and not any(_within(ns, d) for d in KUBELET_NAMESPACES)


def modified_labels(new: dict[str, str], old: dict[str, str]) -> set[str]:
    return {k for k in new.keys() | old.keys() if new.get(k) != old.get(k)}


def _labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def pod_references(pod: dict[str, Any]) -> str | None:
    """What a mirror pod may not refer to, as NodeRestriction names it (None: nothing)."""
    spec = pod.get("spec") or {}
    # this apiserver's pod defaults name `default` on every pod (kube's ServiceAccount admission does, and
    # leaves mirror pods without): only another account is the static pod's own
    if {spec.get("serviceAccountName") or "default", spec.get("serviceAccount") or "default"} != {"default"}:
        return "use service accounts"
    if pod_refs.secret_names(pod):
        return "reference secrets"
    if pod_refs.configmap_names(pod):
        return "reference configmaps"
    if any(v.get("persistentVolumeClaim") or v.get("ephemeral") for v in spec.get("volumes") or []):
        return "reference persistentvolumeclaims"
    if spec.get("resourceClaims"):
        return "reference resourceclaims"
    return None


async def check(resource: str, group: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """A registry write check (create: `old` None): 403 with NodeRestriction's reason for a node's write."""
    subject = REQUESTER.get()
    if subject is None or group != "":
        return
    who = node.node_name_of(subject)
    if who is None:
        return
    name = (obj.get("metadata") or {}).get("name", "")
    if resource == "nodes":
        changed = set(_labels(obj)) if old is None else modified_labels(_labels(obj), _labels(old))
        bad = sorted(label for label in changed if forbidden_label(label))
        if bad:
            what = (f'node "{who}" is not allowed to set the following labels' if old is None
                    else "is not allowed to modify labels")  # kube's two messages, as they are
            raise errors.ApiError(403, "Forbidden", f'nodes "{name}" is forbidden: {what}: {", ".join(bad)}',
                                  {"name": name, "kind": "nodes"})
    if resource == "persistentvolumes" and old is None and auth.pinned_node(obj) != who:
        # whatever path created it (a server-side apply patch of a missing volume among them)
        msg = (f'persistentvolumes "{name}" is forbidden: node "{who}" may only write persistentvolumes '
               "whose nodeAffinity pins them to it")
        raise errors.ApiError(403, "Forbidden", msg, {"name": name, "kind": "persistentvolumes"})
    if resource == "pods" and old is None:
        why = pod_references(obj)
        if why:
            msg = f'pods "{name}" is forbidden: node "{who}" can not create pods that {why}'
            raise errors.ApiError(403, "Forbidden", msg, {"name": name, "kind": "pods"})

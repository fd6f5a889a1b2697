"""What a joining node may do before it has its own identity, and what anyone may read unauthenticated.

A bootstrap token (`system:bootstrap:<id>`, group system:bootstrappers) gets kubeadm's
system:node-bootstrapper role: create CertificateSigningRequests and read them (plus delete its own, so a
refused join leaves nothing behind). Anonymous clients get only kubeadm's public cluster-info.
"""

from __future__ import annotations

from typing import Any

from nodeagent.join.tokens import BOOTSTRAPPERS_GROUP

ANONYMOUS_USER = "system:anonymous"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
CLUSTER_INFO_NS, CLUSTER_INFO_NAME = "kube-public", "cluster-info"
CSR_GROUP, CSR_RESOURCE = "certificates.k8s.io", "certificatesigningrequests"


def is_cluster_info(verb: str, group: str, resource: str, subresource: str, namespace: str, name: str) -> bool:
    return (verb == "get" and not group and resource == "configmaps" and not subresource
            and namespace == CLUSTER_INFO_NS and name == CLUSTER_INFO_NAME)


def may(user_name: str, groups: tuple[str, ...], verb: str, group: str, resource: str, subresource: str,
        namespace: str, name: str, stored: dict[str, Any] | None) -> str | None:
    """None when allowed, else why not (for users that are neither admins nor nodes)."""
    if is_cluster_info(verb, group, resource, subresource, namespace, name):
        return None
    if BOOTSTRAPPERS_GROUP in groups and group == CSR_GROUP and resource == CSR_RESOURCE and not subresource:
        if verb in ("create", "get", "list", "watch"):
            return None
        if verb == "delete" and ((stored or {}).get("spec") or {}).get("username") == user_name:
            return None
        return f"a bootstrap token may only create and read certificate signing requests (not {verb})"
    if UNAUTHENTICATED_GROUP in groups:
        return "anonymous access is limited to kube-public/cluster-info"
    return f"no rule allows {user_name} to {verb} {resource}"

"""certificates.k8s.io names both sides of a CertificateSigningRequest agree on: the built-in signers, the
node identity a kubelet client certificate carries, and reading a request's conditions."""

from __future__ import annotations

from typing import Any

KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"
NODES_GROUP = "system:nodes"
NODE_PREFIX = "system:node:"


def condition(csr: dict[str, Any], type_: str) -> dict[str, Any] | None:
    """The request's condition of this type (Approved, Denied, Failed), if it has one."""
    conditions = (csr.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type_), None)

"""CertificateSigningRequests the way kube-controller-manager's csrapproving and csrsigning treat them.

Auto-approval (csrapproving): a `kubernetes.io/kube-apiserver-client-kubelet` request for CN
`system:node:<name>`, O `system:nodes`, client-auth usages and no SANs, made by a bootstrapper (a new
node) or by that very node (renewal). Signing (csrsigning): approved requests for the two apiserver-client
signers get a certificate from the cluster CA; the CA never signs a CA, and the CSR's own signature
must verify.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from nodeagent.api.bootstrap_token import BOOTSTRAPPERS_GROUP
from nodeagent.api.certificates import CLIENT_SIGNER, KUBELET_CLIENT_SIGNER, NODE_PREFIX, NODES_GROUP

SIGNERS = (KUBELET_CLIENT_SIGNER, CLIENT_SIGNER)
CLIENT_USAGES = {"digital signature", "key encipherment", "client auth"}
DEFAULT_DURATION = 365 * 24 * 3600.0  # kube-controller-manager's --cluster-signing-duration
MIN_DURATION = 600.0


class CSRError(ValueError):
    """A request that cannot be signed, with the reason that goes into its Failed condition."""


def load_request(csr: dict[str, Any]) -> x509.CertificateSigningRequest:
    raw = (csr.get("spec") or {}).get("request") or ""
    try:
        req = x509.load_pem_x509_csr(base64.b64decode(raw))
    except ValueError as e:
        raise CSRError(f"spec.request is not a PEM certificate request: {e}") from None
    if not req.is_signature_valid:
        raise CSRError("the certificate request's signature does not verify")
    return req


def _names(req: x509.CertificateSigningRequest, oid: x509.ObjectIdentifier) -> list[str]:
    return [str(a.value) for a in req.subject.get_attributes_for_oid(oid)]


def is_node_client_request(csr: dict[str, Any], req: x509.CertificateSigningRequest) -> bool:
    """csrapproving's isNodeClientCert: the kubelet signer, O=[system:nodes], CN=system:node:*, client
    usages."""
    spec = csr.get("spec") or {}
    if spec.get("signerName") != KUBELET_CLIENT_SIGNER:
        return False
    if _names(req, NameOID.ORGANIZATION_NAME) != [NODES_GROUP]:
        return False
    cns = _names(req, NameOID.COMMON_NAME)
    if len(cns) != 1 or not cns[0].startswith(NODE_PREFIX) or len(cns[0]) == len(NODE_PREFIX):
        return False
    usages = set(spec.get("usages") or [])
    if "client auth" not in usages or not usages <= CLIENT_USAGES:
        return False
    try:
        req.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        return False  # a client certificate for a node names no hosts
    except x509.ExtensionNotFound:
        return True


def approval(csr: dict[str, Any]) -> str | None:
    """The reason to auto-approve, or None to leave the request to an administrator."""
    try:
        req = load_request(csr)
    except CSRError:
        return None
    if not is_node_client_request(csr, req):
        return None
    spec = csr.get("spec") or {}
    groups = spec.get("groups") or []
    if BOOTSTRAPPERS_GROUP in groups:
        return "Auto approving kubelet client certificate after SubjectAccessReview."
    if spec.get("username") == _names(req, NameOID.COMMON_NAME)[0] and NODES_GROUP in groups:
        return "Auto approving self kubelet client certificate after SubjectAccessReview."
    return None


def sign(csr: dict[str, Any], ca_cert: x509.Certificate, ca_key: Any,
         now: dt.datetime | None = None) -> bytes:
    """The PEM certificate for an approved request (CSRError when it must fail instead)."""
    spec = csr.get("spec") or {}
    if spec.get("signerName") not in SIGNERS:
        raise CSRError(f"signer {spec.get('signerName')!r} is not served by this cluster")
    req = load_request(csr)
    usages = set(spec.get("usages") or [])
    if not usages or not usages <= CLIENT_USAGES or "client auth" not in usages:
        raise CSRError(f"usages {sorted(usages)} are not allowed for signer {spec.get('signerName')}")
    if spec.get("signerName") == KUBELET_CLIENT_SIGNER and not is_node_client_request(csr, req):
        raise CSRError("a kubelet client certificate must be CN=system:node:<name>, O=system:nodes, "
                       "without SANs")
    now = now or dt.datetime.now(dt.UTC)
    seconds = float(spec.get("expirationSeconds") or DEFAULT_DURATION)
    seconds = max(MIN_DURATION, min(seconds, DEFAULT_DURATION))
    not_after = min(now + dt.timedelta(seconds=seconds), ca_cert.not_valid_after_utc)
    key_usage = x509.KeyUsage(digital_signature="digital signature" in usages,
                              content_commitment=False, key_encipherment="key encipherment" in usages,
                              data_encipherment=False, key_agreement=False, key_cert_sign=False,
                              crl_sign=False, encipher_only=False, decipher_only=False)
    cert = (x509.CertificateBuilder().subject_name(req.subject).issuer_name(ca_cert.subject)
            .public_key(req.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(key_usage, critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)

"""The apiserver's serving certificate and its kubelet client certificate, signed by the cluster CA
(nodeagent.pki) and kept under the data dir."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodeagent.pki import ensure_ca, key_pem, write_private


def _wanted_sans(extra_ips: list[str], extra_names: list[str]) -> tuple[set[str], set[str]]:
    ips = {"127.0.0.1", "::1", *extra_ips}
    names = {"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local", socket.gethostname(), *extra_names}
    return {i for i in ips if i and i not in ("0.0.0.0", "::")}, names


def ensure_serving_cert(pki: Path, extra_ips: Sequence[str],
                        extra_names: Sequence[str] = ()) -> tuple[Path, Path]:
    """Serving cert signed by the CA; regenerated when a needed SAN (e.g. a new bind address) is missing."""
    ca, ca_key = ensure_ca(pki)
    crt, key = pki / "apiserver.crt", pki / "apiserver.key"
    ips, names = _wanted_sans(list(extra_ips), list(extra_names))
    if crt.exists() and key.exists():
        cur = x509.load_pem_x509_certificate(crt.read_bytes())
        try:
            san = cur.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            have_ips = {str(i) for i in san.get_values_for_type(x509.IPAddress)}
            have_names = set(san.get_values_for_type(x509.DNSName))
            if ips <= have_ips and names <= have_names:
                return crt, key
        except x509.ExtensionNotFound:
            pass
    k = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in sorted(names)]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in sorted(ips)]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca.subject).public_key(k.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=825))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    write_private(key, key_pem(k))
    write_private(crt, cert.public_bytes(serialization.Encoding.PEM))
    return crt, key


def ensure_kubelet_client_cert(pki: Path) -> tuple[Path, Path]:
    """The client cert the apiserver presents to kubelets (kubeadm's apiserver-kubelet-client:
    CN kube-apiserver-kubelet-client, O system:masters), signed by the cluster CA."""
    ca, ca_key = ensure_ca(pki)
    crt, key = pki / "apiserver-kubelet-client.crt", pki / "apiserver-kubelet-client.key"
    if crt.exists() and key.exists():
        cur = x509.load_pem_x509_certificate(crt.read_bytes())
        if cur.issuer == ca.subject \
                and cur.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=1):
            return crt, key
    k = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                                     x509.NameAttribute(NameOID.COMMON_NAME,
                                                        "kube-apiserver-kubelet-client")]))
            .issuer_name(ca.subject).public_key(k.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=825))
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    write_private(key, key_pem(k))
    write_private(crt, cert.public_bytes(serialization.Encoding.PEM))
    return crt, key
